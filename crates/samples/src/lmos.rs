//! A sample LMOS agent (docs/dialects.md) over the WoT HTTP binding, answering as kotlin-wot
//! does: its ADF (a Thing Description with the `lmos` context, hrefs absolute from the `Host`
//! header) at `GET /things/agent` (and a list of it at `GET /things`), and two synchronous
//! actions at `POST /things/agent/actions/{chat|run}`.
//!
//! - `chat` takes an `AgentRequest` and answers an `AgentResult` whose one assistant message is
//!   the last user message upper-cased. `mode:input` in that text answers "Please provide more"
//!   instead; the next turn (the same `conversationId`, or a replayed history ending in that
//!   answer and a new user message) answers `<FIRST TEXT UPPER-CASED> <new text>`.
//! - `run` takes `{"text", "mode"?}` and answers a JSON string: the text upper-cased, or "Please
//!   provide more" for mode `input` (the action has no way to take input).
//!
//! The mode: `run`'s `mode` field, else the text containing `mode:input` or `mode:fail`. Mode
//! `fail` answers 500.
//!
//! Each invocation takes `work`. Errors, as kotlin-wot: 400 with an empty body for a missing
//! (empty) input, 404 with an empty body for an unknown thing or action, 500 with the text body
//! `500: <cause>` when the handler fails (a failing job, or input it cannot read).

use std::collections::HashMap;
use std::sync::Arc;

use hyper::{Method, StatusCode};
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::{str_field, Call, Mode, Options, Reply};

/// The thing's id, and its path segment.
const THING: &str = "agent";
/// The answer that asks for input.
const ASK: &str = "Please provide more";

/// conversationId → the text of the turn that asked for input.
type Pending = Mutex<HashMap<String, String>>;

/// Serves the agent on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, options: Options) {
    super::serve_with_state(listener, options, handle).await;
}

/// The ADF of the agent served at `base`.
pub fn thing_description(base: &str) -> Value {
    let href = |action: &str| format!("{base}/things/{THING}/actions/{action}");
    let message = json!({"type": "object", "properties": {
        "role": {"type": "string"}, "content": {"type": "string"}, "format": {"type": "string"},
        "turnId": {"type": "string"}}, "required": ["role", "content"]});
    json!({
        "@context": ["https://www.w3.org/2022/wot/td/v1.1", {"lmos": "https://eclipse.dev/lmos/protocol/v1"}],
        "@type": "lmos:Agent",
        "id": THING,
        "title": "SampleAgent",
        "description": "Answers with the text upper-cased. `mode:input` makes it ask for more first; `mode:fail` makes it fail.",
        "version": {"instance": "1.0.0"},
        "lmos:metadata": {"lmos:vendor": {"lmos:name": "interlingua samples", "lmos:url": base}},
        "securityDefinitions": {"nosec_sc": {"scheme": "nosec"}},
        "security": "nosec_sc",
        "actions": {
            "chat": {
                "description": "Chats: the answer is the last user message upper-cased.",
                "safe": false, "idempotent": false, "synchronous": true,
                "input": {"type": "object", "properties": {
                    "messages": {"type": "array", "items": message},
                    "conversationContext": {"type": "object", "properties": {
                        "conversationId": {"type": "string"}, "turnId": {"type": "string"}},
                        "required": ["conversationId"]},
                    "systemContext": {"type": "array", "items": {"type": "object", "properties": {
                        "key": {"type": "string"}, "value": {"type": "string"}}}},
                    "userContext": {"type": "object", "properties": {
                        "userId": {"type": "string"}, "profile": {"type": "array"}}}},
                    "required": ["messages", "conversationContext"]},
                "output": {"type": "object", "properties": {
                    "status": {"type": ["string", "null"]}, "responseTime": {"type": "number"},
                    "messages": {"type": "array", "items": message},
                    "anonymizationEntities": {"type": "array"}}},
                "forms": [{"op": "invokeaction", "href": href("chat"), "contentType": "application/json",
                           "htv:methodName": "POST"}]
            },
            "run": {
                "description": "Runs one job: the answer is the text upper-cased.",
                "safe": false, "idempotent": false, "synchronous": true,
                "input": {"type": "object", "properties": {
                    "text": {"type": "string", "minLength": 1},
                    "mode": {"type": "string", "enum": ["ok", "input", "fail"]}},
                    "required": ["text"]},
                "output": {"type": "string"},
                "forms": [{"op": "invokeaction", "href": href("run"), "contentType": "application/json",
                           "htv:methodName": "POST"}]
            }
        }
    })
}

/// kotlin-wot's answer to a failing handler.
fn failure(cause: &str) -> Reply {
    Reply::Text(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("500: java.lang.IllegalArgumentException: {cause}"),
    )
}

fn empty(status: StatusCode) -> Reply {
    Reply::Text(status, String::new())
}

async fn handle(pending: Arc<Pending>, o: Options, call: Call) -> Reply {
    let segs: Vec<&str> = call.path.split('/').filter(|s| !s.is_empty()).collect();
    match (&call.method, segs.as_slice()) {
        (&Method::GET, ["things"]) => {
            Reply::Json(StatusCode::OK, json!([thing_description(&call.base_url())]))
        }
        (&Method::GET, ["things", THING]) => {
            Reply::Json(StatusCode::OK, thing_description(&call.base_url()))
        }
        (&Method::POST, ["things", THING, "actions", action @ ("chat" | "run")]) => {
            let input = match &call.body {
                None => return empty(StatusCode::BAD_REQUEST),
                Some(Err(e)) => return failure(&format!("the input is not JSON: {e}")),
                Some(Ok(v)) => v,
            };
            let started = o.clock.now();
            let answer = if *action == "chat" {
                chat(&pending, input)
            } else {
                run(input)
            };
            o.clock.sleep(o.work).await;
            match answer {
                Ok(text) if *action == "chat" => Reply::Json(
                    StatusCode::OK,
                    json!({"status": null, "responseTime": o.clock.now().duration_since(started).as_secs_f64(),
                           "messages": [{"role": "assistant", "content": text, "format": "text"}],
                           "anonymizationEntities": []}),
                ),
                Ok(text) => Reply::Json(StatusCode::OK, Value::String(text)),
                Err(cause) => failure(&cause),
            }
        }
        _ => empty(StatusCode::NOT_FOUND),
    }
}

/// The `chat` answer's text, or the cause of a failure.
fn chat(pending: &Pending, input: &Value) -> Result<String, String> {
    let messages = input
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("messages must be a list")?;
    let role = |m: &Value| str_field(m, "role").unwrap_or_default().to_string();
    let content = |m: &Value| str_field(m, "content").unwrap_or_default().to_string();
    let last = messages
        .iter()
        .rposition(|m| role(m) == "user")
        .ok_or("messages hold no user message")?;
    let text = content(&messages[last]);
    let conversation = input
        .pointer("/conversationContext/conversationId")
        .and_then(Value::as_str);
    // A client that replays the history shows the question just before the new message.
    let replayed = last
        .checked_sub(2)
        .filter(|&i| {
            role(&messages[i]) == "user" && Mode::from_text(&content(&messages[i])) == Mode::Input
        })
        .filter(|&i| role(&messages[i + 1]) == "assistant" && content(&messages[i + 1]) == ASK)
        .map(|i| content(&messages[i]));
    let remembered = conversation.and_then(|c| pending.lock().remove(c));
    if let Some(first) = replayed.or(remembered) {
        return Ok(format!("{} {text}", first.to_uppercase()));
    }
    match Mode::from_text(&text) {
        Mode::Fail => Err("the agent failed on purpose".into()),
        Mode::Input => {
            if let Some(c) = conversation {
                pending.lock().insert(c.to_string(), text);
            }
            Ok(ASK.into())
        }
        Mode::Ok => Ok(text.to_uppercase()),
    }
}

/// The `run` answer, or the cause of a failure.
fn run(input: &Value) -> Result<String, String> {
    let text = str_field(input, "text")
        .filter(|t| !t.trim().is_empty())
        .ok_or("text is required")?;
    let mode = match input.get("mode") {
        Some(m) => Mode::from_value(Some(m)),
        None => Mode::from_text(text),
    };
    match mode {
        Mode::Fail => Err("the agent failed on purpose".into()),
        Mode::Input => Ok(ASK.into()),
        Mode::Ok => Ok(text.to_uppercase()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Agent;

    async fn invoke(href: &str, body: Option<Value>) -> reqwest::Response {
        let req = reqwest::Client::new()
            .post(href)
            .header("content-type", "application/json");
        let req = match body {
            Some(b) => req.json(&b),
            None => req,
        };
        req.send().await.unwrap()
    }

    fn request(conversation: &str, turn: &str, messages: Value) -> Value {
        json!({"messages": messages, "conversationContext": {"conversationId": conversation, "turnId": turn},
               "systemContext": [{"key": "channelId", "value": "web"}], "userContext": {"userId": "u-1", "profile": []}})
    }

    #[tokio::test]
    async fn the_adf_is_a_thing_description_with_absolute_action_hrefs() {
        let agent = Agent::start(serve).await;
        let (_, td) = agent.get_json("/things/agent").await;
        assert_eq!(td["@type"], "lmos:Agent");
        assert_eq!(
            td["@context"][1]["lmos"],
            "https://eclipse.dev/lmos/protocol/v1"
        );
        assert_eq!(
            td["actions"]["chat"]["forms"][0]["href"],
            agent.url("/things/agent/actions/chat")
        );
        assert_eq!(td["actions"]["run"]["output"]["type"], "string");
        let (_, list) = agent.get_json("/things").await;
        assert_eq!(list[0]["title"], "SampleAgent");
    }

    #[tokio::test]
    async fn chat_answers_an_agent_result_and_takes_input_on_the_next_turn() {
        let agent = Agent::start(serve).await;
        let href = agent.get_json("/things/agent").await.1["actions"]["chat"]["forms"][0]["href"]
            .as_str()
            .unwrap()
            .to_string();
        let resp = invoke(
            &href,
            Some(request(
                "c-1",
                "1",
                json!([{"role": "user", "content": "what is london?", "format": "text"}]),
            )),
        )
        .await;
        assert_eq!(resp.status(), 200);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(
            v["messages"],
            json!([{"role": "assistant", "content": "WHAT IS LONDON?", "format": "text"}])
        );
        assert_eq!(v["status"], Value::Null);
        assert_eq!(v["anonymizationEntities"], json!([]));
        assert!(v["responseTime"].as_f64().unwrap() > 0.0);

        // By conversation id: the second turn carries only the new message.
        let ask = request(
            "c-2",
            "1",
            json!([{"role": "user", "content": "weather mode:input"}]),
        );
        let v: Value = invoke(&href, Some(ask)).await.json().await.unwrap();
        assert_eq!(v["messages"][0]["content"], ASK);
        let more = request("c-2", "2", json!([{"role": "user", "content": "in Bonn"}]));
        let v: Value = invoke(&href, Some(more)).await.json().await.unwrap();
        assert_eq!(v["messages"][0]["content"], "WEATHER MODE:INPUT in Bonn");

        // By replayed history, in a conversation the agent has not seen.
        let history = request(
            "c-3",
            "2",
            json!([
            {"role": "user", "content": "weather mode:input"}, {"role": "assistant", "content": ASK},
            {"role": "user", "content": "in Köln"}]),
        );
        let v: Value = invoke(&href, Some(history)).await.json().await.unwrap();
        assert_eq!(v["messages"][0]["content"], "WEATHER MODE:INPUT in Köln");
    }

    #[tokio::test]
    async fn run_answers_a_json_string_and_fails_as_kotlin_wot_does() {
        let agent = Agent::start(serve).await;
        let href = agent.url("/things/agent/actions/run");
        let resp = invoke(&href, Some(json!({"text": "hello"}))).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.text().await.unwrap(), "\"HELLO\"");
        let v: Value = invoke(&href, Some(json!({"text": "x", "mode": "input"})))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(v, ASK);
        let resp = invoke(&href, Some(json!({"text": "x", "mode": "fail"}))).await;
        assert_eq!(resp.status(), 500);
        assert_eq!(
            resp.text().await.unwrap(),
            "500: java.lang.IllegalArgumentException: the agent failed on purpose"
        );
        let resp = invoke(&href, Some(json!({"text": "boom mode:fail"}))).await;
        assert_eq!(resp.status(), 500);
    }

    #[tokio::test]
    async fn missing_input_is_400_and_unknown_actions_are_404() {
        let agent = Agent::start(serve).await;
        let resp = invoke(&agent.url("/things/agent/actions/run"), None).await;
        assert_eq!(resp.status(), 400);
        assert_eq!(resp.text().await.unwrap(), "");
        let resp = invoke(&agent.url("/things/agent/actions/fly"), Some(json!({}))).await;
        assert_eq!(resp.status(), 404);
        let resp = invoke(
            &agent.url("/things/other/actions/run"),
            Some(json!({"text": "x"})),
        )
        .await;
        assert_eq!(resp.status(), 404);
        let resp = invoke(
            &agent.url("/things/agent/actions/chat"),
            Some(json!({"conversationContext": {}})),
        )
        .await;
        assert_eq!(resp.status(), 500);
        assert!(resp.text().await.unwrap().starts_with("500: "));
    }
}
