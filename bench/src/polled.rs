//! The tasks a get_task contender's clients poll: made on an instance through the canned
//! upstream's keep-running answer, so that each stays running and every poll reaches the agent.
//! Used by the main comparison (`run`) and the curves (`curves`).

use std::time::Duration;

use serde_json::Value;

use crate::canned::KEEP_RUNNING;
use crate::http::Request;
use crate::stack::{Running, DID};

/// Creates a Nevermined task that stays running on a full-pipeline instance; returns the path
/// its clients poll.
pub fn start_polled_task(run: &Running, token: &str) -> Result<String, String> {
    let limit = Duration::from_secs(10);
    let a = Request::post(
        format!("/api/v1/agents/{DID}/tasks"),
        format!(r#"{{"input_query":"{KEEP_RUNNING}"}}"#),
    )
    .bearer(token)
    .send(run.addr, limit)?;
    if a.status != 201 {
        return Err(format!(
            "creating the task to poll answered {}: {}",
            a.status, a.body
        ));
    }
    let v: Value = serde_json::from_str(&a.body).map_err(|e| format!("create answer: {e}"))?;
    let id = v["task"]["task_id"]
        .as_str()
        .ok_or("the create answer has no task.task_id")?;
    Ok(format!("/api/v1/agents/{DID}/tasks/{id}"))
}

/// Creates a MIP-003 job that stays running on a reverse instance; returns its status path.
pub fn start_polled_job(run: &Running, token: &str) -> Result<String, String> {
    let a = Request::post(
        "/start_job",
        format!(r#"{{"identifier_from_purchaser":"0123456789abcdef","input_data":{{"text":"{KEEP_RUNNING}"}}}}"#),
    )
    .bearer(token)
    .send(run.addr, Duration::from_secs(10))?;
    if a.status != 200 {
        return Err(format!(
            "creating the job to poll answered {}: {}",
            a.status, a.body
        ));
    }
    let v: Value = serde_json::from_str(&a.body).map_err(|e| format!("start_job answer: {e}"))?;
    let id = v["job_id"]
        .as_str()
        .or(v["id"].as_str())
        .ok_or("the start_job answer has no id")?;
    Ok(format!("/status?job_id={id}"))
}
