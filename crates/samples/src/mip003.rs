//! A sample MIP-003 agent (the endpoints of the masumi reference server).
//!
//! Timeline of a job taking `work`: `awaiting_payment` for the first quarter, `running`, then
//! `completed` (the result is the input `text` upper-cased) or `failed` (mode `fail`: `input_data.mode`,
//! or `mode:fail` / `mode:input` in the text when there is no `mode`). With mode
//! `input` the job stops halfway in `awaiting_input`, asking for a field `more`, and finishes half
//! a `work` after the input arrives, with `more` appended to the result. An agent asking in words
//! ([`Ask::Words`]) names no field: its status carries the question as `message` and no
//! `input_schema`, and the answer is `input_data.text`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use hyper::{Method, StatusCode};
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::{Ask, Call, Mode, Options, QUESTION};
use masumi::mip004;

struct Job {
    purchaser: String,
    text: String,
    mode: Mode,
    started: Instant,
    /// When the input arrived, and what it was.
    input: Option<(Instant, String)>,
}

enum Phase {
    AwaitingPayment,
    Running,
    AwaitingInput,
    Completed(String),
    Failed,
}

impl Job {
    fn phase(&self, o: &Options, now: Instant) -> Phase {
        let t = now.duration_since(self.started);
        if t < o.work / 4 {
            return Phase::AwaitingPayment;
        }
        match (self.mode, &self.input) {
            (Mode::Input, None) if t >= o.work / 2 => Phase::AwaitingInput,
            (Mode::Input, Some((at, more))) if now.duration_since(*at) >= o.work / 2 => {
                Phase::Completed(format!("{} {more}", self.text.to_uppercase()))
            }
            (Mode::Input, _) => Phase::Running,
            (Mode::Fail, _) if t >= o.work => Phase::Failed,
            (Mode::Ok, _) if t >= o.work => Phase::Completed(self.text.to_uppercase()),
            _ => Phase::Running,
        }
    }
}

/// The schema of start_job's input_data.
pub fn input_schema() -> Value {
    json!({"input_data": [
        {"id": "text", "type": "text", "name": "Text", "validations": [{"validation": "min", "value": "1"}]},
        {"id": "mode", "type": "option", "name": "Mode", "data": {"values": ["ok", "input", "fail"]},
         "validations": [{"validation": "optional", "value": "true"}]}
    ]})
}

fn more_schema() -> Value {
    json!({"input_data": [{"id": "more", "type": "text", "name": "More details"}]})
}

fn detail(status: StatusCode, message: &str) -> (StatusCode, Value) {
    (status, json!({"detail": message}))
}

/// Serves the agent on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, options: Options) {
    let jobs: Arc<Mutex<HashMap<String, Job>>> = Arc::default();
    super::serve(listener, move |call| {
        let (jobs, options) = (jobs.clone(), options.clone());
        async move { handle(&jobs, &options, call) }
    })
    .await;
}

fn handle(jobs: &Mutex<HashMap<String, Job>>, o: &Options, call: Call) -> (StatusCode, Value) {
    let body = match &call.body {
        Some(Ok(v)) => v.clone(),
        Some(Err(e)) => return detail(StatusCode::BAD_REQUEST, &format!("invalid JSON: {e}")),
        None => Value::Null,
    };
    match (&call.method, call.path.as_str()) {
        (&Method::POST, "/start_job") => {
            let Some(purchaser) = body
                .get("identifier_from_purchaser")
                .and_then(Value::as_str)
            else {
                return detail(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "identifier_from_purchaser is required",
                );
            };
            let input = body.get("input_data").cloned().unwrap_or(json!({}));
            let Some(text) = input
                .get("text")
                .and_then(Value::as_str)
                .filter(|t| !t.trim().is_empty())
            else {
                return (
                    StatusCode::BAD_REQUEST,
                    json!({"detail": {"message": "Validation failed: Required field 'text' is missing",
                                      "field_errors": {"text": ["Required field 'text' is missing"]}}}),
                );
            };
            let id = uuid::Uuid::new_v4().to_string();
            let hash = mip004::input_hash(purchaser, &input).unwrap_or_default();
            jobs.lock().insert(
                id.clone(),
                Job {
                    purchaser: purchaser.to_string(),
                    text: text.to_string(),
                    mode: Mode::from_value_or_text(input.get("mode"), text),
                    started: o.clock.now(),
                    input: None,
                },
            );
            let now_ms = chrono::Utc::now().timestamp_millis();
            (
                StatusCode::OK,
                json!({
                    "id": id, "blockchainIdentifier": format!("sample_{}", &id[..8]),
                    "payByTime": now_ms + 43_200_000, "submitResultTime": now_ms + 86_400_000,
                    "unlockTime": now_ms + 108_000_000, "externalDisputeUnlockTime": now_ms + 129_600_000,
                    "agentIdentifier": "sample-mip003-agent", "sellerVKey": "sample_vkey",
                    "identifierFromPurchaser": purchaser, "input_hash": hash,
                }),
            )
        }
        (&Method::GET, "/status") => {
            let Some(job_id) = call.query("job_id") else {
                return detail(StatusCode::UNPROCESSABLE_ENTITY, "job_id is required");
            };
            let jobs = jobs.lock();
            let Some(job) = jobs.get(job_id) else {
                return detail(StatusCode::NOT_FOUND, "Job not found");
            };
            let status_id = uuid::Uuid::new_v4().to_string();
            let (status, schema, result) = match job.phase(o, o.clock.now()) {
                Phase::AwaitingPayment => ("awaiting_payment", Value::Null, Value::Null),
                Phase::Running => ("running", Value::Null, Value::Null),
                Phase::AwaitingInput if o.ask == Ask::Words => {
                    ("awaiting_input", Value::Null, Value::Null)
                }
                Phase::AwaitingInput => ("awaiting_input", more_schema(), Value::Null),
                Phase::Completed(r) => ("completed", Value::Null, Value::String(r)),
                Phase::Failed => ("failed", Value::Null, Value::Null),
            };
            let mut answer = json!({"id": status_id, "job_id": job_id, "status": status,
                                    "input_schema": schema, "result": result});
            if status == "awaiting_input" && o.ask == Ask::Words {
                answer["message"] = json!(QUESTION);
            }
            (StatusCode::OK, answer)
        }
        (&Method::POST, "/provide_input") => {
            let job_id = body
                .get("job_id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let mut jobs = jobs.lock();
            let Some(job) = jobs.get_mut(&job_id) else {
                return detail(StatusCode::NOT_FOUND, &format!("Job {job_id} not found"));
            };
            if !matches!(job.phase(o, o.clock.now()), Phase::AwaitingInput) {
                return detail(
                    StatusCode::BAD_REQUEST,
                    &format!("Job {job_id} is not awaiting input"),
                );
            }
            let data = body.get("input_data").cloned().unwrap_or(json!({}));
            // Asked in words, the answer is the reply's text; asked in a field, that field.
            let field = match o.ask {
                Ask::Fields => "more",
                Ask::Words => "text",
            };
            let Some(more) = data
                .get(field)
                .and_then(Value::as_str)
                .filter(|m| !m.trim().is_empty())
            else {
                let message = format!("Validation failed: Required field '{field}' is missing");
                return (
                    StatusCode::BAD_REQUEST,
                    json!({"detail": {"message": message,
                                      "field_errors": {field: [format!("Required field '{field}' is missing")]}}}),
                );
            };
            job.input = Some((o.clock.now(), more.to_string()));
            let hash = mip004::input_hash(&job.purchaser, &data).unwrap_or_default();
            (StatusCode::OK, json!({"input_hash": hash, "signature": ""}))
        }
        (&Method::GET, "/availability") => (
            StatusCode::OK,
            json!({"status": "available", "type": "masumi-agent", "message": "Sample agent operational"}),
        ),
        (&Method::GET, "/input_schema") => (StatusCode::OK, input_schema()),
        _ => detail(StatusCode::NOT_FOUND, "Not Found"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{eventually, Agent};

    #[tokio::test]
    async fn asking_in_words_names_no_field_and_takes_the_answer_as_the_text() {
        let agent = Agent::start_asking_in_words(serve).await;
        let (status, started) = agent
            .post_json(
                "/start_job",
                json!({"identifier_from_purchaser": "p1", "input_data": {"text": "hi mode:input"}}),
            )
            .await;
        assert_eq!(status, 200, "{started}");
        let job = started["id"].as_str().unwrap().to_string();
        let asked = eventually("the job to ask", || async {
            let (_, s) = agent.get_json(&format!("/status?job_id={job}")).await;
            (s["status"] == "awaiting_input").then_some(s)
        })
        .await;
        assert_eq!(asked["input_schema"], Value::Null, "{asked}");
        assert_eq!(asked["message"], QUESTION, "{asked}");
        // A field answer is not the text.
        let (status, refused) = agent
            .post_json(
                "/provide_input",
                json!({"job_id": job, "input_data": {"more": "x"}}),
            )
            .await;
        assert_eq!(status, 400, "{refused}");
        let (status, _) = agent
            .post_json(
                "/provide_input",
                json!({"job_id": job, "input_data": {"text": "more text"}}),
            )
            .await;
        assert_eq!(status, 200);
        let done = eventually("the job to complete", || async {
            let (_, s) = agent.get_json(&format!("/status?job_id={job}")).await;
            (s["status"] == "completed").then_some(s)
        })
        .await;
        assert_eq!(done["result"], "HI MODE:INPUT more text");
    }
}
