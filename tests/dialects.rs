//! The other dialects through the real proxy, against the sample agents: A2A, LMOS,
//! MultiAgentEval and OpenAI chat as fronts over a MIP-003 agent (create → running → input →
//! completed, a failing task, credits metered per step), and A2A, LMOS, MultiAgentEval, NEAR AI
//! and OpenAI chat as backs under a MIP-003 front.

mod common;

use std::time::Duration;

use common::money::{paid_config, paid_route, Admin};
use common::secrets::token;
use common::wait::{eventually, states};
use common::{client, sample_agent_on, status_and_json, Proxy};
use mapping::task::Status;
use samples::Clock;
use serde_json::{json, Value};

/// How long a sample job takes in these tests.
const WORK: Duration = Duration::from_millis(400);

/// The sample agents and a proxy with a route per dialect and direction: `/<front>` is that
/// front over the MIP-003 agent; `/to-<back>` is a MIP-003 front over that back's agent. Every
/// route needs a token of plan `gold`; a task holds 1 credit and costs 1.
struct World {
    proxy: Proxy,
    admin: Admin,
    http: reqwest::Client,
    /// The clock of the A2A, chat and LMOS agents behind `/to-<back>`: [`World::job`] moves it a
    /// job's time on each look at a job, so that the job is done when the test looks for its
    /// outcome.
    backs: Clock,
}

async fn world() -> World {
    world_on(&Clock::default()).await
}

/// [`world`], the MIP-003 agent's jobs going by `clock`.
async fn world_on(clock: &Clock) -> World {
    let mip = sample_agent_on(samples::mip003::serve, WORK, clock).await;
    let backs = Clock::manual();
    let a2a = sample_agent_on(samples::a2a::serve, WORK, &backs).await;
    let openai = sample_agent_on(samples::openai::serve, WORK, &backs).await;
    let lmos = sample_agent_on(samples::lmos::serve, WORK, &backs).await;
    // On the real clock: MultiAgentEval answers each turn, input included, only after its work
    // (a call no poll could move on), and NEAR AI orders a thread's messages by when they came.
    let mae = sample_agent_on(samples::mae::serve, WORK, &Clock::default()).await;
    let nearai = sample_agent_on(samples::nearai::serve, WORK, &Clock::default()).await;
    let mut rest = String::new();
    for (name, addr) in [
        ("mip", mip),
        ("a2a-agent", a2a),
        ("openai-agent", openai),
        ("lmos-agent", lmos),
        ("mae-agent", mae),
        ("nearai-agent", nearai),
    ] {
        rest.push_str(&format!(
            "[[upstreams]]\nname = \"{name}\"\naddress = \"{addr}\"\nread_timeout = \"5s\"\n"
        ));
    }
    let routes = [
        ("a2a", "mip", "a2a", "mip003"),
        ("chat", "mip", "openai_chat", "mip003"),
        ("lmos", "mip", "lmos", "mip003"),
        ("mae", "mip", "multiagent_eval", "mip003"),
        ("to-a2a", "a2a-agent", "mip003", "a2a"),
        ("to-chat", "openai-agent", "mip003", "openai_chat"),
        ("to-lmos", "lmos-agent", "mip003", "lmos"),
        ("to-mae", "mae-agent", "mip003", "multiagent_eval"),
        ("to-nearai", "nearai-agent", "mip003", "nearai"),
    ];
    for (name, upstream, front, back) in routes {
        rest.push_str(&paid_route(
            name,
            &format!("/{name}"),
            upstream,
            front,
            back,
            "sync_timeout = \"10s\"",
        ));
    }
    let proxy = Proxy::start(&paid_config(&rest));
    World {
        admin: Admin::new(&proxy),
        proxy,
        http: client(),
        backs,
    }
}

impl World {
    async fn post(&self, path: &str, sub: &str, body: Value) -> (u16, Value) {
        let resp = self
            .http
            .post(self.proxy.url(path))
            .bearer_auth(token(sub))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    async fn get(&self, path: &str, sub: &str) -> (u16, Value) {
        let resp = self
            .http
            .get(self.proxy.url(path))
            .bearer_auth(token(sub))
            .send()
            .await
            .unwrap();
        status_and_json(resp).await
    }

    /// The whole text of a streamed answer (it ends when the task settles).
    async fn stream(&self, path: &str, sub: &str, body: Value) -> (u16, String, Vec<Value>) {
        let resp = self
            .http
            .post(self.proxy.url(path))
            .bearer_auth(token(sub))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let text = resp.text().await.unwrap();
        let events = text
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect();
        assert_eq!(content_type, "text/event-stream", "{text}");
        (status, text, events)
    }
}

// ---------------------------------------------------------------- A2A front

fn rpc(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn message(parts: Value) -> Value {
    json!({"messageId": "m-1", "role": "ROLE_USER", "parts": parts})
}

impl World {
    /// Polls GetTask until the state is one of `until`; returns every state seen and the task.
    async fn a2a_poll(&self, sub: &str, id: &str, until: &[&str]) -> (Vec<String>, Value) {
        let (seen, v) = states(&format!("task {id}"), until, || async {
            let (status, v) = self
                .post("/a2a", sub, rpc(2, "GetTask", json!({"id": id})))
                .await;
            assert_eq!(status, 200, "{v}");
            let state = v["result"]["status"]["state"].as_str().unwrap().to_string();
            (state, v)
        })
        .await;
        (seen, v["result"].clone())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_front_runs_a_mip003_agent_through_input_to_completion_and_charges_once() {
    // The job moves on when the test says: each of its states is seen, however slow the host.
    let clock = Clock::manual();
    let w = world_on(&clock).await;
    w.admin.grant("ann", 5).await;
    let (status, v) = w
        .post(
            "/a2a",
            "ann",
            rpc(
                7,
                "SendMessage",
                json!({"message": message(json!([{"text": "hello"}, {"data": {"mode": "input"}}])),
                       "configuration": {"returnImmediately": true}}),
            ),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["id"], 7);
    assert_eq!(v["jsonrpc"], "2.0");
    let task = &v["result"]["task"];
    let id = task["id"].as_str().unwrap().to_string();
    assert_eq!(task["contextId"], id);
    assert!(
        ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"]
            .contains(&task["status"]["state"].as_str().unwrap()),
        "{v}"
    );

    let (mut states, mut waiting) = (Vec::<String>::new(), Value::Null);
    for (after, until) in [
        (Duration::ZERO, "TASK_STATE_SUBMITTED"),
        (WORK / 4, "TASK_STATE_WORKING"),
        (WORK / 4, "TASK_STATE_INPUT_REQUIRED"),
    ] {
        clock.advance(after);
        let (seen, task) = w.a2a_poll("ann", &id, &[until]).await;
        for s in seen {
            if states.last() != Some(&s) {
                states.push(s);
            }
        }
        waiting = task;
    }
    assert_eq!(
        states,
        [
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
            "TASK_STATE_INPUT_REQUIRED"
        ],
    );
    assert!(
        waiting["status"]["message"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains("More details"),
        "{waiting}"
    );

    // The answer goes to the task; a blocking send answers when the task has settled: once the
    // agent has the input and the proxy has seen the task running again, the job finishes.
    let answer = w.post(
        "/a2a",
        "ann",
        rpc(8, "SendMessage", json!({"message": {"messageId": "m-2", "role": "ROLE_USER", "taskId": id, "parts": [{"text": "please"}]}})),
    );
    let finish = async {
        w.proxy
            .latest_task("given its input", |t| {
                t.turn == 2 && t.status == Status::Running
            })
            .await;
        clock.advance(WORK / 2);
    };
    let ((status, v), ()) = tokio::join!(answer, finish);
    assert_eq!(status, 200, "{v}");
    let done = &v["result"]["task"];
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{v}");
    assert_eq!(
        done["artifacts"][0]["parts"][0]["text"], "HELLO please",
        "{v}"
    );
    // Another subject does not see the task.
    let (_, v) = w
        .post("/a2a", "bob", rpc(9, "GetTask", json!({"id": id})))
        .await;
    assert_eq!(v["error"]["code"], -32001, "{v}");
    w.admin.charged("ann", 5, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_front_a_failing_task_is_failed_and_free() {
    let w = world().await;
    w.admin.grant("ann", 5).await;
    let (_, v) = w
        .post(
            "/a2a",
            "ann",
            rpc(1, "message/send", json!({"message": {"kind": "message", "messageId": "m", "role": "user",
                "parts": [{"kind": "text", "text": "x"}, {"kind": "data", "data": {"mode": "fail"}}]},
                "configuration": {"blocking": false}})),
        )
        .await;
    // 0.3 in, 0.3 out: the bare task with its kind.
    assert_eq!(v["result"]["kind"], "task", "{v}");
    let id = v["result"]["id"].as_str().unwrap().to_string();
    let (_, v) = eventually("the failure", || async {
        let (s, v) = w
            .post("/a2a", "ann", rpc(2, "tasks/get", json!({"id": id})))
            .await;
        if v["result"]["status"]["state"] == "failed" {
            Ok((s, v))
        } else {
            Err(v)
        }
    })
    .await;
    assert_eq!(v["result"]["kind"], "task");
    w.admin.charged("ann", 5, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_front_streams_progress_as_server_sent_events() {
    let w = world().await;
    w.admin.grant("ann", 5).await;
    let (status, text, events) = w
        .stream(
            "/a2a",
            "ann",
            rpc(
                3,
                "SendStreamingMessage",
                json!({"message": message(json!([{"text": "hi"}]))}),
            ),
        )
        .await;
    assert_eq!(status, 200);
    assert!(events.len() >= 3, "{text}");
    assert!(
        events.iter().all(|e| e["id"] == 3 && e["jsonrpc"] == "2.0"),
        "{text}"
    );
    assert!(events[0]["result"]["task"]["id"].is_string(), "{text}");
    let n = events.len();
    assert_eq!(
        events[n - 2]["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"],
        "HI",
        "{text}"
    );
    assert_eq!(
        events[n - 1]["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{text}"
    );
    w.admin.charged("ann", 5, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_front_errors_are_json_rpc_errors_with_the_request_id() {
    let w = world().await;
    let (status, v) = w
        .post("/a2a", "ann", rpc(11, "NoSuchMethod", json!({})))
        .await;
    assert_eq!(status, 200);
    assert_eq!(v["id"], 11);
    assert_eq!(v["error"]["code"], -32601, "{v}");
    assert_eq!(
        v["error"]["data"],
        Value::Null,
        "0.3 clients get no data: {v}"
    );
    let (_, v) = w
        .post("/a2a", "ann", rpc(12, "GetTask", json!({"id": "nope"})))
        .await;
    assert_eq!(v["error"]["code"], -32001, "{v}");
    assert_eq!(v["error"]["data"][0]["reason"], "TASK_NOT_FOUND", "{v}");
    let (_, v) = w.post("/a2a", "ann", rpc(13, "GetTask", json!({}))).await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
    // Not JSON: a parse error, id null.
    let resp = w
        .http
        .post(w.proxy.url("/a2a"))
        .bearer_auth(token("ann"))
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        (v["id"].clone(), v["error"]["code"].clone()),
        (Value::Null, json!(-32700))
    );
    // No credits: the hold cannot be taken; 402 stays an HTTP status.
    let (status, v) = w
        .post(
            "/a2a",
            "nobody",
            rpc(
                14,
                "SendMessage",
                json!({"message": message(json!([{"text": "x"}]))}),
            ),
        )
        .await;
    assert_eq!(status, 402, "{v}");
    assert_eq!(v["id"], 14);
    // Without a token, 401 before JSON-RPC.
    let resp = w
        .http
        .post(w.proxy.url("/a2a"))
        .json(&rpc(1, "GetTask", json!({"id": "x"})))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_front_serves_an_agent_card_for_the_route() {
    let w = world().await;
    // The card says how to authenticate, so it needs no token itself.
    let resp = w
        .http
        .get(w.proxy.url("/a2a/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let card: Value = resp.json().await.unwrap();
    let url = w.proxy.url("/a2a/");
    assert_eq!(
        card["supportedInterfaces"][0],
        json!({"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"})
    );
    assert_eq!(card["name"], "a2a");
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
}

// ---------------------------------------------------------------- OpenAI chat front

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_front_answers_a_completion_streams_and_fails_as_an_error() {
    let w = world().await;
    w.admin.grant("ann", 5).await;
    let ask = |text: &str, stream: bool| {
        json!({"model": "m", "stream": stream, "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": text}]}]})
    };
    let (status, v) = w
        .post("/chat/v1/chat/completions", "ann", ask("hello", false))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "m");
    assert_eq!(
        v["choices"][0]["message"],
        json!({"role": "assistant", "content": "HELLO"})
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));

    let (status, text, events) = w
        .stream("/chat/v1/chat/completions", "ann", ask("hey", true))
        .await;
    assert_eq!(status, 200);
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert_eq!(
        events[0]["choices"][0]["delta"]["role"], "assistant",
        "{text}"
    );
    let content: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "HEY");
    assert_eq!(
        events.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );

    // The MIP-003 agent fails with mode "fail" in its input: the text's mode reaches it as a
    // param only from structured fronts, so here the failure comes from an input it rejects.
    let (status, v) = w
        .post(
            "/chat/v1/chat/completions",
            "ann",
            json!({"model": "m", "messages": []}),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert_eq!(v["error"]["param"], Value::Null);
    w.admin.charged("ann", 5, 2).await;
}

// ---------------------------------------------------------------- the new dialects as backs

impl World {
    /// Starts a MIP-003 job on `route` with `text`; returns its id.
    async fn start_job(&self, route: &str, sub: &str, text: &str) -> String {
        let (status, v) = self
            .post(
                &format!("/{route}/start_job"),
                sub,
                json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": text}}),
            )
            .await;
        assert_eq!(status, 200, "{route}: {v}");
        v["job_id"].as_str().unwrap().to_string()
    }

    /// Polls a MIP-003 job until its status is one of `until`; every status seen, and the last
    /// answer.
    async fn job(&self, route: &str, sub: &str, job: &str, until: &[&str]) -> (Vec<String>, Value) {
        states(&format!("{route}: job {job}"), until, || async {
            self.backs.advance(WORK);
            let (status, v) = self
                .get(&format!("/{route}/status?job_id={job}"), sub)
                .await;
            assert_eq!(status, 200, "{route}: {v}");
            (v["status"].as_str().unwrap().to_string(), v)
        })
        .await
    }

    /// A job that completes, one that fails, and (where the back can ask) one that asks for
    /// input and completes after it; the subject is charged one credit per completed job.
    async fn back_lifecycle(&self, route: &str, asks_for_input: bool) {
        let sub = format!("{route}-user");
        self.admin.grant(&sub, 10).await;
        let ok = self.start_job(route, &sub, "hello").await;
        let (_, v) = self.job(route, &sub, &ok, &["completed", "failed"]).await;
        assert_eq!(
            (v["status"].as_str(), v["result"].as_str()),
            (Some("completed"), Some("HELLO")),
            "{route}: {v}"
        );

        let bad = self.start_job(route, &sub, "hello mode:fail").await;
        let (_, v) = self.job(route, &sub, &bad, &["completed", "failed"]).await;
        assert_eq!(v["status"], "failed", "{route}: {v}");

        let mut completed = 1;
        if asks_for_input {
            let job = self.start_job(route, &sub, "hello mode:input").await;
            let (_, v) = self
                .job(
                    route,
                    &sub,
                    &job,
                    &["awaiting_input", "completed", "failed"],
                )
                .await;
            assert_eq!(v["status"], "awaiting_input", "{route}: {v}");
            // The answer goes in the first field the question asks for.
            let field = v["input_schema"]["input_data"][0]["id"]
                .as_str()
                .unwrap_or_else(|| panic!("{route}: the question's fields: {v}"))
                .to_string();
            let (status, r) = self
                .post(
                    &format!("/{route}/provide_input"),
                    &sub,
                    json!({"job_id": job, "status_id": v["id"], "input_data": {field: "more"}}),
                )
                .await;
            assert_eq!(status, 200, "{route}: {r}");
            let (_, v) = self.job(route, &sub, &job, &["completed", "failed"]).await;
            assert_eq!(
                (v["status"].as_str(), v["result"].as_str()),
                (Some("completed"), Some("HELLO MODE:INPUT more")),
                "{route}: {v}"
            );
            completed += 1;
        }
        self.admin.charged(&sub, 10, completed).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_agent_behind_a_mip003_front() {
    world().await.back_lifecycle("to-a2a", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_chat_model_behind_a_mip003_front() {
    world().await.back_lifecycle("to-chat", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_lmos_agent_behind_a_mip003_front() {
    world().await.back_lifecycle("to-lmos", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multiagent_eval_agent_behind_a_mip003_front() {
    world().await.back_lifecycle("to-mae", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nearai_agent_behind_a_mip003_front() {
    world().await.back_lifecycle("to-nearai", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_front_a_question_is_the_answer_and_a_failure_is_an_error() {
    let w = world().await;
    w.admin.grant("cat", 5).await;
    let ask = |text: &str| json!({"model": "m", "messages": [{"role": "user", "content": text}]});
    let (status, v) = w
        .post("/chat/v1/chat/completions", "cat", ask("hi mode:input"))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "The agent needs more input: More details"
    );
    let (status, v) = w
        .post("/chat/v1/chat/completions", "cat", ask("hi mode:fail"))
        .await;
    assert_eq!(status, 502, "{v}");
    assert_eq!(v["error"]["type"], "api_error", "{v}");
    assert_eq!(v["error"]["code"], "task_failed", "{v}");
}

// ---------------------------------------------------------------- LMOS front

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lmos_front_describes_the_agent_and_runs_actions_and_conversations() {
    let w = world().await;
    w.admin.grant("dan", 10).await;
    let (status, adf) = w.get("/lmos/things/lmos", "dan").await;
    assert_eq!(status, 200, "{adf}");
    assert_eq!(adf["@type"], "lmos:Agent");
    assert_eq!(
        adf["@context"][1]["lmos"],
        "https://eclipse.dev/lmos/protocol/v1"
    );
    assert_eq!(adf["security"], "bearer_sc");
    let run = &adf["actions"]["run"];
    assert_eq!(
        run["forms"][0]["href"],
        w.proxy.url("/lmos/things/lmos/actions/run")
    );
    // The MIP-003 agent's input schema, as JSON Schema.
    assert_eq!(
        run["input"]["properties"]["text"]["type"], "string",
        "{adf}"
    );
    // An option without bounds may hold several values: an array of the enum.
    assert_eq!(
        run["input"]["properties"]["mode"]["items"]["enum"],
        json!(["ok", "input", "fail"]),
        "{adf}"
    );

    let (status, v) = w
        .post(
            "/lmos/things/lmos/actions/run",
            "dan",
            json!({"text": "hello"}),
        )
        .await;
    assert_eq!((status, v), (200, json!("HELLO")));
    // Input the agent's schema refuses: 400, per field.
    let (status, v) = w
        .post("/lmos/things/lmos/actions/run", "dan", json!({"text": ""}))
        .await;
    assert_eq!(status, 400, "{v}");
    let (status, v) = w
        .post(
            "/lmos/things/lmos/actions/run",
            "dan",
            json!({"text": "x", "mode": "fail"}),
        )
        .await;
    assert_eq!(status, 502, "{v}");
    assert_eq!(v["errorCode"], "TASK_FAILED", "{v}");

    let chat = |turn: &str, text: &str| {
        json!({"messages": [{"role": "user", "content": text, "format": "text"}],
               "conversationContext": {"conversationId": "c-1", "turnId": turn}})
    };
    let reply = |v: &Value| v["messages"][0]["content"].as_str().unwrap().to_string();
    let (status, v) = w
        .post(
            "/lmos/things/lmos/actions/chat",
            "dan",
            chat("1", "hi mode:input"),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(reply(&v), "The agent needs more input: More details");
    let (_, v) = w
        .post("/lmos/things/lmos/actions/chat", "dan", chat("2", "please"))
        .await;
    assert_eq!(reply(&v), "HI MODE:INPUT please", "{v}");
    // The conversation's task has ended: the next turn is a new task.
    let (_, v) = w
        .post("/lmos/things/lmos/actions/chat", "dan", chat("3", "again"))
        .await;
    assert_eq!(reply(&v), "AGAIN", "{v}");
    w.admin.charged("dan", 10, 3).await;
}

// ---------------------------------------------------------------- MultiAgentEval front

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiagent_eval_front_runs_turns_pauses_for_a_human_and_reports_errors() {
    let w = world().await;
    w.admin.grant("eve", 10).await;
    let turn = |run: &str, n: u64, text: &str| {
        json!({"task_description": text, "turn": n, "run_id": run,
               "conversation_history": [{"role": "user", "content": text}]})
    };
    let (status, v) = w
        .post("/mae/execute_task", "eve", turn("r-1", 1, "hello"))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["action"].as_str(), v["summary"].as_str()),
        (Some("final_answer"), Some("HELLO")),
        "{v}"
    );

    let (_, v) = w
        .post("/mae/execute_task", "eve", turn("r-2", 1, "hi mode:input"))
        .await;
    assert_eq!(v["action"], "hitl_pause", "{v}");
    assert_eq!(
        v["reason"], "The agent needs more input: More details",
        "{v}"
    );
    let (_, v) = w
        .post("/mae/execute_task", "eve", turn("r-2", 2, "more"))
        .await;
    assert_eq!(
        (v["action"].as_str(), v["summary"].as_str()),
        (Some("final_answer"), Some("HI MODE:INPUT more")),
        "{v}"
    );

    let (_, v) = w
        .post("/mae/execute_task", "eve", turn("r-3", 1, "x mode:fail"))
        .await;
    assert_eq!(v["action"], "error", "{v}");
    assert!(v["message"].is_string(), "{v}");

    let (_, v) = w
        .post(
            "/mae/execute_task",
            "eve",
            json!({"task_description": "health_check"}),
        )
        .await;
    assert_eq!(v, json!({"action": "final_answer", "summary": "ok"}));
    let (status, v) = w.post("/mae/execute_task", "eve", json!({"turn": 1})).await;
    assert_eq!(status, 400, "{v}");
    w.admin.charged("eve", 10, 2).await;
}
