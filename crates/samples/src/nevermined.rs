//! A sample Nevermined Query Protocol agent: the subscriber endpoints (create, get with steps,
//! search) and the step update that carries input, answering as the Nevermined hub does.
//!
//! Timeline of a task taking `work`: `Pending` for the first quarter (step `init`), then
//! `In_Progress` (step `work`), then `Completed` with the query upper-cased, or `Failed` (mode
//! `fail`). With mode `input` the task stops halfway: step `ask` waits (`is_waiting`,
//! `Not_Ready`) with an `input_schema` asking for `more`, while the task stays `In_Progress`, as
//! real Nevermined agents leave it; a `PUT` of that step with `input_additional.more` lets it
//! finish half a `work` later (step `finish`). Each step that completes costs 1 credit. An agent
//! asking in words ([`Ask::Words`]) names no field: the waiting step's output is the question,
//! with no `input_schema`, and the answer is the update's `input_query`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use hyper::{Method, StatusCode};
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::{Ask, Call, Mode, Options, QUESTION};
use mapping::task::time::format_iso_ms;

struct Task {
    id: String,
    did: String,
    name: String,
    query: String,
    additional: Value,
    mode: Mode,
    started: Instant,
    created: DateTime<Utc>,
    /// Step ids, fixed at creation: init, work, ask, finish.
    steps: [String; 4],
    input: Option<(Instant, String)>,
}

/// One step as the hub reports it.
struct StepView {
    index: usize,
    name: &'static str,
    status: &'static str,
    is_last: bool,
    output: String,
    output_additional: Value,
}

fn more_schema() -> Value {
    json!({"input_data": [{"id": "more", "type": "text", "name": "More details"}]})
}

impl Task {
    /// The task's status, output and steps at `now`.
    fn view(&self, o: &Options, now: Instant) -> (&'static str, String, Value, Vec<StepView>) {
        let t = now.duration_since(self.started);
        let step = |index, name, status, is_last, output: &str, extra: Value| StepView {
            index,
            name,
            status,
            is_last,
            output: output.to_string(),
            output_additional: extra,
        };
        if t < o.work / 4 {
            return (
                "Pending",
                String::new(),
                json!({}),
                vec![step(0, "init", "Pending", false, "", json!({}))],
            );
        }
        let init = step(0, "init", "Completed", false, "", json!({}));
        let upper = self.query.to_uppercase();
        match (self.mode, &self.input) {
            // The step waits; the task is still in progress (Nevermined's agents mark the
            // waiting step, `is_waiting` in payments-py's step model, not the task: see
            // docs/dialects.md).
            (Mode::Input, None) if t >= o.work / 2 => {
                let ask = match o.ask {
                    Ask::Fields => step(
                        2,
                        "ask",
                        "Not_Ready",
                        false,
                        "",
                        json!({"input_schema": more_schema()}),
                    ),
                    Ask::Words => step(2, "ask", "Not_Ready", false, QUESTION, json!({})),
                };
                (
                    "In_Progress",
                    String::new(),
                    json!({}),
                    vec![
                        init,
                        step(1, "work", "Completed", false, "", json!({})),
                        ask,
                    ],
                )
            }
            (Mode::Input, Some((at, more))) => {
                let done = now.duration_since(*at) >= o.work / 2;
                let out = format!("{upper} {more}");
                let ask = step(2, "ask", "Completed", false, "", json!({}));
                let work = step(1, "work", "Completed", false, "", json!({}));
                if done {
                    let finish = step(3, "finish", "Completed", true, &out, json!({}));
                    ("Completed", out, json!({}), vec![init, work, ask, finish])
                } else {
                    let finish = step(3, "finish", "In_Progress", false, "", json!({}));
                    (
                        "In_Progress",
                        String::new(),
                        json!({}),
                        vec![init, work, ask, finish],
                    )
                }
            }
            (Mode::Fail, _) if t >= o.work => (
                "Failed",
                String::new(),
                json!({}),
                vec![init, step(1, "work", "Failed", true, "", json!({}))],
            ),
            (Mode::Ok, _) if t >= o.work => (
                "Completed",
                upper.clone(),
                json!({}),
                vec![init, step(1, "work", "Completed", true, &upper, json!({}))],
            ),
            _ => (
                "In_Progress",
                String::new(),
                json!({}),
                vec![init, step(1, "work", "In_Progress", false, "", json!({}))],
            ),
        }
    }

    fn render(&self, o: &Options) -> Value {
        let (status, output, additional, steps) = self.view(o, o.clock.now());
        let created = format_iso_ms(self.created);
        let updated = format_iso_ms(Utc::now());
        let steps: Vec<Value> = steps
            .iter()
            .map(|s| {
                let cost = u64::from(s.status == "Completed");
                json!({
                    "step_id": self.steps[s.index], "task_id": self.id, "did": self.did, "name": s.name,
                    "step_status": s.status, "order": s.index + 1, "is_last": s.is_last,
                    "is_waiting": s.status == "Not_Ready", "retries": 0,
                    "predecessor": if s.index == 0 { String::new() } else { self.steps[s.index - 1].clone() },
                    "input_query": if s.index == 0 { self.query.clone() } else { String::new() },
                    "input_additional": {}, "input_artifacts": [],
                    "output": s.output, "output_additional": s.output_additional, "output_artifacts": [],
                    "cost": cost, "createdAt": created, "updatedAt": updated,
                })
            })
            .collect();
        let cost: u64 = steps.iter().filter_map(|s| s["cost"].as_u64()).sum();
        json!({
            "task": {
                "task_id": self.id, "did": self.did, "user": "0x0000000000000000000000000000000000000001",
                "task_status": status, "name": self.name, "input_query": self.query,
                "input_additional": self.additional, "input_artifacts": [],
                "output": output, "output_additional": additional, "output_artifacts": [],
                "cost": cost, "createdAt": created, "updatedAt": updated, "owner": "us-sample",
            },
            "steps": steps,
            "logs": [],
        })
    }
}

fn error(status: StatusCode, message: &str) -> (StatusCode, Value) {
    (
        status,
        json!({"statusCode": status.as_u16(), "message": message,
               "error": status.canonical_reason().unwrap_or("Error")}),
    )
}

/// Serves the agent on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, options: Options) {
    let tasks: Arc<Mutex<HashMap<String, Task>>> = Arc::default();
    super::serve(listener, move |call| {
        let (tasks, options) = (tasks.clone(), options.clone());
        async move { handle(&tasks, &options, call) }
    })
    .await;
}

fn handle(tasks: &Mutex<HashMap<String, Task>>, o: &Options, call: Call) -> (StatusCode, Value) {
    let body = match &call.body {
        Some(Ok(v)) => v.clone(),
        Some(Err(e)) => return error(StatusCode::BAD_REQUEST, &format!("invalid JSON: {e}")),
        None => Value::Null,
    };
    let segs: Vec<&str> = call.path.split('/').filter(|s| !s.is_empty()).collect();
    match (&call.method, segs.as_slice()) {
        (&Method::POST, ["api", "v1", "agents", "search", "tasks"]) => {
            let tasks = tasks.lock();
            let found: Vec<Value> = tasks
                .values()
                .map(|t| t.render(o)["task"].clone())
                .collect();
            let total = found.len();
            (
                StatusCode::OK,
                json!({"tasks": found, "totalResults": total, "page": 1, "offset": total}),
            )
        }
        (&Method::POST, ["api", "v1", "agents", did, "tasks"]) => {
            let Some(query) = body.get("input_query").and_then(Value::as_str) else {
                return error(StatusCode::BAD_REQUEST, "input_query must be a string");
            };
            let additional = body.get("input_additional").cloned().unwrap_or(json!({}));
            let id = format!("task-{}", uuid::Uuid::new_v4());
            let step = || format!("step-{}", uuid::Uuid::new_v4());
            let task = Task {
                id: id.clone(),
                did: (*did).to_string(),
                name: body
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                query: query.to_string(),
                mode: Mode::from_value_or_text(additional.get("mode"), query),
                additional,
                started: o.clock.now(),
                created: Utc::now(),
                steps: [step(), step(), step(), step()],
                input: None,
            };
            let rendered = task.render(o);
            tasks.lock().insert(id, task);
            (
                StatusCode::CREATED,
                json!({"task": rendered["task"], "steps": rendered["steps"]}),
            )
        }
        (&Method::GET, ["api", "v1", "agents", _did, "tasks", task_id]) => {
            match tasks.lock().get(*task_id) {
                Some(t) => (StatusCode::OK, t.render(o)),
                None => error(StatusCode::NOT_FOUND, "Task not found"),
            }
        }
        (&Method::PUT, ["api", "v1", "agents", _did, "tasks", task_id, "step", step_id]) => {
            let mut tasks = tasks.lock();
            let Some(t) = tasks.get_mut(*task_id) else {
                return error(StatusCode::NOT_FOUND, "Task not found");
            };
            if *step_id != t.steps[2] {
                return error(StatusCode::BAD_REQUEST, "this step takes no input");
            }
            let (_, _, _, steps) = t.view(o, o.clock.now());
            if !steps
                .iter()
                .any(|s| s.index == 2 && s.status == "Not_Ready")
            {
                return error(StatusCode::BAD_REQUEST, "the task is not waiting for input");
            }
            let query = body.get("input_query").and_then(Value::as_str);
            // Asked in words, the answer is the update's query; asked in a field, that field
            // (or, failing it, the query).
            let more = match o.ask {
                Ask::Fields => body
                    .get("input_additional")
                    .and_then(|a| a.get("more"))
                    .and_then(Value::as_str)
                    .or(query),
                Ask::Words => query,
            }
            .filter(|m| !m.trim().is_empty());
            let Some(more) = more else {
                return error(
                    StatusCode::BAD_REQUEST,
                    match o.ask {
                        Ask::Fields => "input_additional.more is required",
                        Ask::Words => "input_query must be a non-empty string",
                    },
                );
            };
            t.input = Some((o.clock.now(), more.to_string()));
            let rendered = t.render(o);
            let step = rendered["steps"][2].clone();
            (StatusCode::CREATED, step)
        }
        _ => error(StatusCode::NOT_FOUND, "Not Found"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{eventually, Agent};

    #[tokio::test]
    async fn asking_in_words_names_no_field_and_takes_the_answer_as_the_query() {
        let agent = Agent::start_asking_in_words(serve).await;
        let (status, made) = agent
            .post_json(
                "/api/v1/agents/did:nv:1/tasks",
                json!({"input_query": "hi mode:input"}),
            )
            .await;
        assert_eq!(status, 201, "{made}");
        let task = made["task"]["task_id"].as_str().unwrap().to_string();
        let url = format!("/api/v1/agents/did:nv:1/tasks/{task}");
        let asked = eventually("the task to ask", || async {
            let (_, t) = agent.get_json(&url).await;
            let waiting = t["steps"]
                .as_array()?
                .iter()
                .find(|s| s["step_status"] == "Not_Ready")?
                .clone();
            Some(waiting)
        })
        .await;
        assert_eq!(asked["output"], QUESTION, "{asked}");
        assert_eq!(asked["output_additional"], json!({}), "{asked}");
        let step = format!("{url}/step/{}", asked["step_id"].as_str().unwrap());
        let put = |body: Value| agent.http.put(agent.url(&step)).json(&body).send();
        // An answer in a field, with no query, is refused as the hub's agents refuse it.
        let refused = put(json!({"input_query": "", "input_additional": {"more": "x"}}))
            .await
            .unwrap();
        assert_eq!(refused.status(), 400);
        let taken = put(json!({"input_query": "more text"})).await.unwrap();
        assert_eq!(taken.status(), 201);
        let done = eventually("the task to complete", || async {
            let (_, t) = agent.get_json(&url).await;
            (t["task"]["task_status"] == "Completed").then_some(t)
        })
        .await;
        assert_eq!(done["task"]["output"], "HI MODE:INPUT more text");
    }
}
