//! A sample OpenAI Chat Completions agent (docs/dialects.md): `POST /v1/chat/completions` and
//! `GET /v1/models`. Any bearer key is accepted, and any `model` is answered (and echoed).
//!
//! The answer comes after `work` and is the last user message's text upper-cased. The mode is
//! in the first user message's text:
//! - `mode:fail`: HTTP 500 with OpenAI's error shape (`type` `server_error`).
//! - `mode:input`: while no assistant message follows that first user message, the answer is
//!   "Please provide more"; once the client replays the conversation with that answer and a new
//!   user message, the answer is `<FIRST USER TEXT UPPER-CASED> <last user text>`.
//!
//! With `stream: true` the answer is an event stream spread over `work`: a chunk with the
//! assistant role, one chunk per word, a chunk with `finish_reason` `stop` (and, with
//! `stream_options.include_usage`, a usage chunk), then `data: [DONE]`.

use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::{str_field, Call, Mode, Options, Reply};

/// The answer to a first message asking for input.
const ASK: &str = "Please provide more";
/// The model `/v1/models` lists.
const MODEL: &str = "gpt-4o-mini";

/// Serves the agent on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, options: Options) {
    super::serve(listener, move |call| {
        let options = options.clone();
        async move { handle(&options, call).await }
    })
    .await;
}

/// OpenAI's error body; all four keys are always present.
fn error(
    status: StatusCode,
    kind: &str,
    message: &str,
    param: Option<&str>,
    code: Option<&str>,
) -> Reply {
    Reply::Json(
        status,
        json!({"error": {"message": message, "type": kind, "param": param, "code": code}}),
    )
}

/// A message's text: a string, or the `text` parts of an array joined by spaces.
fn text_of(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| str_field(p, "text"))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// The answer to a conversation, or `None` when the conversation asks to fail.
fn answer(messages: &[Value]) -> Option<String> {
    let role = |m: &Value| str_field(m, "role").unwrap_or_default().to_string();
    let first = messages.iter().position(|m| role(m) == "user");
    let first_text = first.map(|i| text_of(&messages[i])).unwrap_or_default();
    let last_text = messages
        .iter()
        .rev()
        .find(|m| role(m) == "user")
        .map(text_of)
        .unwrap_or_default();
    match Mode::from_text(&first_text) {
        Mode::Fail => None,
        Mode::Input => {
            let answered =
                first.is_some_and(|i| messages[i..].iter().any(|m| role(m) == "assistant"));
            Some(if answered {
                format!("{} {last_text}", first_text.to_uppercase())
            } else {
                ASK.to_string()
            })
        }
        Mode::Ok => Some(last_text.to_uppercase()),
    }
}

fn words(s: &str) -> u64 {
    s.split_whitespace().count() as u64
}

async fn handle(o: &Options, call: Call) -> Reply {
    match (&call.method, call.path.as_str()) {
        (&Method::GET, "/v1/models") => Reply::Json(
            StatusCode::OK,
            json!({"object": "list", "data": [{"id": MODEL, "object": "model", "created": 1_700_000_000, "owned_by": "system"}]}),
        ),
        (&Method::POST, "/v1/chat/completions") => complete(o, &call).await,
        (method, path) => error(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            &format!("Invalid URL ({method} {path})"),
            None,
            None,
        ),
    }
}

async fn complete(o: &Options, call: &Call) -> Reply {
    let invalid = |message: &str, param: Option<&str>, code: Option<&str>| {
        error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            message,
            param,
            code,
        )
    };
    let body = match &call.body {
        Some(Ok(v)) if v.is_object() => v,
        _ => {
            return invalid(
                "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)",
                None,
                None,
            )
        }
    };
    let Some(model) = str_field(body, "model") else {
        return invalid("you must provide a model parameter", None, None);
    };
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return invalid(
            "Missing required parameter: 'messages'.",
            Some("messages"),
            Some("missing_required_parameter"),
        );
    };
    if messages.is_empty() {
        return invalid(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
            Some("messages"),
            Some("empty_array"),
        );
    }
    let Some(content) = answer(messages) else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "the agent failed on purpose",
            None,
            None,
        );
    };
    let id = format!("chatcmpl-{}", uuid::Uuid::new_v4().simple());
    let created = chrono::Utc::now().timestamp();
    let prompt_tokens: u64 = messages.iter().map(|m| words(&text_of(m))).sum();
    let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": words(&content),
                       "total_tokens": prompt_tokens + words(&content)});
    if body.get("stream") == Some(&json!(true)) {
        let include_usage = body.pointer("/stream_options/include_usage") == Some(&json!(true));
        let (tx, reply) = Reply::sse_channel();
        let chunk = move |choices: Value| {
            json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": choices})
        };
        let delta = |delta: Value, finish: Value| {
            chunk(json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]))
                .to_string()
        };
        let mut events = vec![delta(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        )];
        for (i, word) in content.split(' ').enumerate() {
            let piece = if i == 0 {
                word.to_string()
            } else {
                format!(" {word}")
            };
            events.push(delta(json!({"content": piece}), Value::Null));
        }
        events.push(delta(json!({}), json!("stop")));
        if include_usage {
            let mut last = chunk(json!([]));
            last["usage"] = usage;
            events.push(last.to_string());
        }
        events.push("[DONE]".to_string());
        let pause = o.work / u32::try_from(events.len()).unwrap_or(u32::MAX);
        let clock = o.clock.clone();
        tokio::spawn(async move {
            for (i, e) in events.into_iter().enumerate() {
                if i > 0 {
                    clock.sleep(pause).await;
                }
                if tx.send(e).await.is_err() {
                    return;
                }
            }
        });
        return reply;
    }
    o.clock.sleep(o.work).await;
    Reply::Json(
        StatusCode::OK,
        json!({
            "id": id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "refusal": null},
                         "logprobs": null, "finish_reason": "stop"}],
            "usage": usage,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Agent, Events};

    async fn post(agent: &Agent, body: Value) -> reqwest::Response {
        agent
            .http
            .post(agent.url("/v1/chat/completions"))
            .bearer_auth("sk-anything")
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_completion_upper_cases_the_last_user_message() {
        let agent = Agent::start(serve).await;
        let resp = post(&agent, json!({"model": "m-1", "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]}
        ]}))
        .await;
        assert_eq!(resp.status(), 200);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["model"], "m-1");
        assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert_eq!(
            v["choices"][0]["message"],
            json!({"role": "assistant", "content": "HELLO THERE", "refusal": null})
        );
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert_eq!(
            v["usage"],
            json!({"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7})
        );
    }

    #[tokio::test]
    async fn mode_input_asks_first_and_answers_the_replayed_conversation() {
        let agent = Agent::start(serve).await;
        let first = json!({"role": "user", "content": "plan a trip mode:input"});
        let v: Value = post(&agent, json!({"model": MODEL, "messages": [first]}))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], ASK);
        let v: Value = post(
            &agent,
            json!({"model": MODEL, "messages": [
                first, {"role": "assistant", "content": ASK}, {"role": "user", "content": "to Rome"}
            ]}),
        )
        .await
        .json()
        .await
        .unwrap();
        assert_eq!(
            v["choices"][0]["message"]["content"],
            "PLAN A TRIP MODE:INPUT to Rome"
        );
    }

    #[tokio::test]
    async fn mode_fail_and_bad_requests_answer_in_openai_error_shape() {
        let agent = Agent::start(serve).await;
        let resp = post(
            &agent,
            json!({"model": MODEL, "messages": [{"role": "user", "content": "x mode:fail"}]}),
        )
        .await;
        assert_eq!(resp.status(), 500);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(
            v,
            json!({"error": {"message": "the agent failed on purpose", "type": "server_error", "param": null, "code": null}})
        );
        let resp = post(&agent, json!({"model": MODEL})).await;
        assert_eq!(resp.status(), 400);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["param"], "messages");
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }

    #[tokio::test]
    async fn streaming_sends_chunks_then_done() {
        let agent = Agent::start(serve).await;
        let resp = post(
            &agent,
            json!({"model": MODEL, "stream": true, "stream_options": {"include_usage": true},
                                      "messages": [{"role": "user", "content": "one two three"}]}),
        )
        .await;
        assert_eq!(resp.status(), 200);
        let mut events = Events::new(resp);
        let mut content = String::new();
        let mut finish = None;
        let mut usage = None;
        loop {
            let data = events.next().await.expect("a [DONE] event");
            if data == "[DONE]" {
                break;
            }
            let chunk: Value = serde_json::from_str(&data).unwrap();
            assert_eq!(chunk["object"], "chat.completion.chunk");
            if let Some(c) = chunk
                .pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
            {
                content.push_str(c);
            }
            if let Some(f) = chunk
                .pointer("/choices/0/finish_reason")
                .and_then(Value::as_str)
            {
                finish = Some(f.to_string());
            }
            if chunk.get("usage").is_some() {
                usage = Some(chunk["usage"].clone());
            }
        }
        assert_eq!(events.next().await, None);
        assert_eq!(content, "ONE TWO THREE");
        assert_eq!(finish.as_deref(), Some("stop"));
        assert_eq!(usage.unwrap()["completion_tokens"], 3);
    }

    #[tokio::test]
    async fn models_lists_one_model() {
        let agent = Agent::start(serve).await;
        let (_, v) = agent.get_json("/v1/models").await;
        assert_eq!(v["object"], "list");
        assert_eq!(v["data"][0]["id"], MODEL);
    }
}
