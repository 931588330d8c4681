//! A sample MultiAgentEval agent (docs/dialects.md): `POST /execute_task`, one synchronous
//! action object per turn, the caller driving the loop. It is driven by turns, not by the clock;
//! each turn takes a quarter of `work`.
//!
//! Turn 1 (or a request without `turn`), by the text of `task_description`:
//! - `health_check` → `{"action":"final_answer","summary":"ok"}` at once;
//! - containing `mode:fail` → `{"action":"error","message":"the agent failed on purpose"}`;
//! - containing `mode:input` → `{"action":"hitl_pause","reason":"Please provide more"}`;
//! - containing `mode:tool` → `{"action":"call_tool","tool_name":"lookup","tool_params":{"q":<text>}}`;
//! - otherwise `{"action":"final_answer","summary":<text upper-cased>}`.
//!
//! Turn ≥ 2 answers `{"action":"final_answer","summary":<FIRST TASK UPPER-CASED> <this text>}`,
//! where the first task is the first `user` entry of `conversation_history`, else the turn-1
//! text remembered under the same `run_id`, else empty.
//!
//! Errors: 400 `{"error":"Missing 'task_description' in request body"}`; 400 for a body that is
//! not JSON; 404 `{"error":"Not Found"}` elsewhere.

use std::collections::HashMap;
use std::sync::Arc;

use hyper::{Method, StatusCode};
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::{str_field, Call, Mode, Options};

/// run_id → the turn-1 task description.
type Runs = Mutex<HashMap<String, String>>;

/// Serves the agent on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, options: Options) {
    super::serve_with_state(listener, options, handle).await;
}

async fn handle(runs: Arc<Runs>, o: Options, call: Call) -> (StatusCode, Value) {
    if call.path != "/execute_task" {
        return (StatusCode::NOT_FOUND, json!({"error": "Not Found"}));
    }
    if call.method != Method::POST {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            json!({"error": "Method Not Allowed"}),
        );
    }
    let body = match &call.body {
        Some(Ok(v)) => v,
        Some(Err(_)) => {
            return (
                StatusCode::BAD_REQUEST,
                json!({"error": "Invalid JSON in request body"}),
            )
        }
        None => &Value::Null,
    };
    let Some(task) = str_field(body, "task_description") else {
        return (
            StatusCode::BAD_REQUEST,
            json!({"error": "Missing 'task_description' in request body"}),
        );
    };
    if task == "health_check" {
        return (
            StatusCode::OK,
            json!({"action": "final_answer", "summary": "ok"}),
        );
    }
    o.clock.sleep(o.work / 4).await;
    let turn = body.get("turn").and_then(Value::as_u64).unwrap_or(1);
    let run_id = str_field(body, "run_id");
    if turn >= 2 {
        let from_history = body
            .get("conversation_history")
            .and_then(Value::as_array)
            .and_then(|h| h.iter().find(|e| str_field(e, "role") == Some("user")))
            .and_then(|e| str_field(e, "content"))
            .map(str::to_string);
        let first = from_history
            .or_else(|| run_id.and_then(|r| runs.lock().get(r).cloned()))
            .unwrap_or_default();
        return (
            StatusCode::OK,
            json!({"action": "final_answer", "summary": format!("{} {task}", first.to_uppercase())}),
        );
    }
    if let Some(r) = run_id {
        runs.lock().insert(r.to_string(), task.to_string());
    }
    let action = match Mode::from_text(task) {
        Mode::Fail => json!({"action": "error", "message": "the agent failed on purpose"}),
        Mode::Input => json!({"action": "hitl_pause", "reason": "Please provide more"}),
        Mode::Ok if task.contains("mode:tool") => {
            json!({"action": "call_tool", "tool_name": "lookup", "tool_params": {"q": task}})
        }
        Mode::Ok => json!({"action": "final_answer", "summary": task.to_uppercase()}),
    };
    (StatusCode::OK, action)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Agent;

    async fn turn(agent: &Agent, body: Value) -> (u16, Value) {
        agent.post_json("/execute_task", body).await
    }

    #[tokio::test]
    async fn turn_one_answers_by_mode() {
        let agent = Agent::start(serve).await;
        let t1 = |text: &str| {
            json!({"task_description": text, "turn": 1,
                                      "conversation_history": [{"role": "user", "content": text}]})
        };
        assert_eq!(
            turn(&agent, t1("check tier")).await,
            (
                200,
                json!({"action": "final_answer", "summary": "CHECK TIER"})
            )
        );
        assert_eq!(
            turn(&agent, t1("x mode:input")).await.1,
            json!({"action": "hitl_pause", "reason": "Please provide more"})
        );
        assert_eq!(
            turn(&agent, t1("x mode:fail")).await.1,
            json!({"action": "error", "message": "the agent failed on purpose"})
        );
        assert_eq!(
            turn(&agent, t1("find mode:tool")).await.1,
            json!({"action": "call_tool", "tool_name": "lookup", "tool_params": {"q": "find mode:tool"}})
        );
        // AgentV sends only the task description.
        assert_eq!(
            turn(&agent, json!({"task_description": "hi"})).await.1["summary"],
            "HI"
        );
    }

    #[tokio::test]
    async fn a_later_turn_finishes_with_the_first_task_and_the_reply() {
        let agent = Agent::start(serve).await;
        let first = "look it up mode:tool";
        let (_, action) = turn(
            &agent,
            json!({"task_description": first, "turn": 1, "run_id": "r-1"}),
        )
        .await;
        assert_eq!(action["action"], "call_tool");
        let reply = "Tool 'lookup' returned: {\"a\":1}. Continue.";
        let with_history = json!({"task_description": reply, "turn": 2, "conversation_history": [
            {"role": "user", "content": first}, {"role": "agent", "content": action}]});
        let expected = format!("LOOK IT UP MODE:TOOL {reply}");
        assert_eq!(
            turn(&agent, with_history).await.1,
            json!({"action": "final_answer", "summary": expected})
        );
        let by_run = json!({"task_description": reply, "turn": 2, "run_id": "r-1"});
        assert_eq!(turn(&agent, by_run).await.1["summary"], expected);
    }

    #[tokio::test]
    async fn health_check_and_errors() {
        let agent = Agent::start(serve).await;
        assert_eq!(
            turn(&agent, json!({"task_description": "health_check"})).await,
            (200, json!({"action": "final_answer", "summary": "ok"}))
        );
        assert_eq!(
            turn(&agent, json!({"turn": 1})).await,
            (
                400,
                json!({"error": "Missing 'task_description' in request body"})
            )
        );
        assert_eq!(
            agent.get_json("/nope").await,
            (404, json!({"error": "Not Found"}))
        );
    }
}
