//! The `mcp` front on the wire, request by request: what an MCP client sends over Streamable
//! HTTP (JSON-RPC POSTed to the route's prefix) and exactly what it gets back, over interlingua's
//! sample MIP-003 agent, with the ledger rows each call leaves. The official SDKs drive the same
//! route in `tests/mcp_sdk.rs`; this file pins the bytes, the statuses and the error table.

mod common;

use std::time::Duration;

use common::money::{ledger, paid_config, paid_route, rows, Admin};
use common::secrets::token;
use common::{client, sample_agent, Proxy};
use serde_json::{json, Value};

/// How long a job takes on the sample agent: long enough for several progress events.
const WORK: Duration = Duration::from_millis(1200);
/// Long enough that a call gives up at the route's `sync_timeout` (1 s on `/slow`).
const SLOW_WORK: Duration = Duration::from_secs(4);

/// A request body, its extra headers, and the HTTP status and JSON-RPC code it must get.
type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], u16, i64);

struct World {
    proxy: Proxy,
    admin: Admin,
    http: reqwest::Client,
}

/// A proxy with these routes over the sample MIP-003 agent, each a paid route (hold 1, 1 per
/// step), tool name = route name:
///
/// | prefix | route (tool) | agent | sync_timeout | dialect |
/// |---|---|---|---|---|
/// | `/mcp` | `upper` | work [`WORK`] | 10 s | `mcp` |
/// | `/slow` | `slow_upper` | work [`SLOW_WORK`] | 1 s | `mcp` |
/// | `/tick` | `ticking` | work [`SLOW_WORK`] | 10 s | `mcp` with a heartbeat every 300 ms |
async fn world() -> World {
    let agent = sample_agent(samples::mip003::serve, WORK).await;
    let slow = sample_agent(samples::mip003::serve, SLOW_WORK).await;
    // The shipped mapping with a short heartbeat, as an operator would write their own.
    let mappings = tempfile::tempdir().unwrap();
    let shipped = include_str!("../mappings/mcp.toml");
    assert!(shipped.contains("every = \"10s\""));
    std::fs::write(
        mappings.path().join("mcp_tick.toml"),
        shipped
            .replace("dialect = \"mcp\"", "dialect = \"mcp_tick\"")
            .replace("every = \"10s\"", "every = \"300ms\""),
    )
    .unwrap();
    let mut rest = format!(
        "[[upstreams]]\nname = \"agent\"\naddress = \"{agent}\"\n\n\
         [[upstreams]]\nname = \"slow\"\naddress = \"{slow}\"\n"
    );
    rest.push_str(&paid_route(
        "upper",
        "/mcp",
        "agent",
        "mcp",
        "mip003",
        "sync_timeout = \"10s\"",
    ));
    rest.push_str(&paid_route(
        "slow_upper",
        "/slow",
        "slow",
        "mcp",
        "mip003",
        "sync_timeout = \"1s\"",
    ));
    rest.push_str(&paid_route(
        "ticking",
        "/tick",
        "slow",
        "mcp_tick",
        "mip003",
        "sync_timeout = \"10s\"",
    ));
    let config = paid_config(&rest).replacen(
        "threads = 2\n",
        &format!(
            "threads = 2\nmappings_dir = \"{}\"\n",
            mappings.path().display()
        ),
        1,
    );
    let proxy = Proxy::start(&config);
    // The proxy has read the mappings; the directory may go.
    drop(mappings);
    World {
        admin: Admin::new(&proxy),
        proxy,
        http: client(),
    }
}

/// One HTTP answer: status, headers of interest, and the JSON-RPC messages of its body (one
/// for a JSON answer, one per `data:` event for a stream).
#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: Option<String>,
    messages: Vec<Value>,
    raw: String,
}

impl Answer {
    fn last(&self) -> &Value {
        self.messages.last().expect("a message")
    }
}

impl World {
    /// POSTs `body` to `prefix` as `subject` (no token if `None`), with the headers every MCP
    /// client sends, plus `extra`.
    async fn post(
        &self,
        prefix: &str,
        subject: Option<&str>,
        body: &str,
        extra: &[(&str, &str)],
    ) -> Answer {
        let mut req = self
            .http
            .post(self.proxy.url(prefix))
            .header("content-type", "application/json")
            .body(body.to_string());
        if !extra.iter().any(|(k, _)| k.eq_ignore_ascii_case("accept")) {
            req = req.header("accept", "application/json, text/event-stream");
        }
        if let Some(s) = subject {
            req = req.bearer_auth(token(s));
        }
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        answer(req.send().await.expect("a response")).await
    }

    /// A legacy `initialize` at `prefix` as `subject`, declaring `capabilities`: the session id
    /// it is given.
    async fn initialize(&self, prefix: &str, subject: &str, capabilities: Value) -> String {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities,
            "clientInfo": {"name": "t", "version": "1"}}});
        let r = self
            .http
            .post(self.proxy.url(prefix))
            .bearer_auth(token(subject))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(init.to_string())
            .send()
            .await
            .expect("an answer to initialize");
        assert_eq!(r.status(), 200);
        r.headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .expect("a session id")
            .to_string()
    }

    async fn call(&self, prefix: &str, subject: &str, id: u64, tool: &str, args: Value) -> Answer {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args, "_meta": {"progressToken": id}}});
        self.post(prefix, Some(subject), &body.to_string(), &[])
            .await
    }
}

async fn answer(r: reqwest::Response) -> Answer {
    let status = r.status().as_u16();
    let content_type = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let raw = r.text().await.expect("a body");
    let messages = if content_type.as_deref() == Some("text/event-stream") {
        raw.split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).expect("an event is JSON"))
            .collect()
    } else if raw.is_empty() {
        Vec::new()
    } else {
        vec![serde_json::from_str(&raw).expect("a JSON answer")]
    };
    Answer {
        status,
        content_type,
        messages,
        raw,
    }
}

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_front_answers_the_protocol_itself_and_refuses_what_it_does_not_serve() {
    let w = world().await;
    let me = Some("mcp-proto");
    // initialize: the version asked for when served, else the newest; no session.
    let a = w
        .post("/mcp", me, r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#, &[])
        .await;
    assert_eq!(
        (a.status, a.content_type.as_deref()),
        (200, Some("application/json"))
    );
    let r = &a.last()["result"];
    assert_eq!(a.last()["id"], 0);
    assert_eq!(r["protocolVersion"], "2025-06-18");
    assert_eq!(
        r["capabilities"],
        json!({"tools": {"listChanged": false},
            "tasks": {"cancel": {}, "list": {}, "requests": {"tools": {"call": {}}}}})
    );
    assert_eq!(r["serverInfo"]["name"], "upper");
    for asked in ["2026-07-28", "1999-01-01"] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"{asked}","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
        );
        let a = w.post("/mcp", me, &body, &[]).await;
        assert_eq!(a.last()["result"]["protocolVersion"], "2025-11-25", "{a:?}");
    }
    // Notifications and responses: 202, no body, no content type.
    for body in [
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#,
        r#"{"jsonrpc":"2.0","id":"x-1","result":{}}"#,
    ] {
        let a = w.post("/mcp", me, body, &[]).await;
        assert_eq!(
            (a.status, a.content_type.as_deref(), a.raw.as_str()),
            (202, None, ""),
            "{body}"
        );
    }
    let a = w
        .post(
            "/mcp",
            me,
            r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#,
            &[],
        )
        .await;
    assert_eq!(
        a.last(),
        &json!({"jsonrpc": "2.0", "id": "p", "result": {}})
    );
    // tools/list: the route's tool, its input schema the agent's, and the helper tools.
    let a = w
        .post(
            "/mcp",
            me,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
            &[("mcp-protocol-version", "2025-11-25")],
        )
        .await;
    let tools = a.last()["result"]["tools"]
        .as_array()
        .expect("tools")
        .clone();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "upper",
            "interlingua_task_get",
            "interlingua_task_input",
            "interlingua_task_cancel"
        ]
    );
    let schema = &tools[0]["inputSchema"];
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["text"]));
    assert_eq!(schema["properties"]["text"]["type"], "string");
    // No outputSchema: SDK clients would reject the results that name a task.
    assert!(tools.iter().all(|t| t.get("outputSchema").is_none()));

    // The error table: transport faults keep their HTTP status, JSON-RPC ones are 200.
    const MODERN: &[(&str, &str)] = &[
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "initialize"),
    ];
    let cases: [Case; 9] = [
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"server/discover"}"#,
            &[("mcp-protocol-version", "2099-01-01")],
            400,
            -32022,
        ),
        // 2026-07-28: no initialize, no ping (404); headers must agree with the body (-32020).
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"initialize","params":{}}"#,
            MODERN,
            404,
            -32601,
        ),
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/list"}"#,
            MODERN,
            400,
            -32020,
        ),
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#,
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "ping"),
            ],
            404,
            -32601,
        ),
        (
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/list"}"#,
            &[("accept", "application/json")],
            406,
            -32600,
        ),
        (
            r#"[{"jsonrpc":"2.0","id":7,"method":"ping"}]"#,
            &[],
            400,
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","id":8,"method":"resources/list"}"#,
            &[],
            200,
            -32601,
        ),
        (
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"nope","arguments":{}}}"#,
            &[],
            200,
            -32602,
        ),
        (r#"{"jsonrpc":"2.0","id":"#, &[], 400, -32700),
    ];
    for (body, headers, status, code) in cases {
        let a = w.post("/mcp", me, body, headers).await;
        assert_eq!(
            (a.status, a.last()["error"]["code"].as_i64()),
            (status, Some(code)),
            "{body}: {a:?}"
        );
    }
    let a = w
        .post(
            "/mcp",
            me,
            r#"{"jsonrpc":"2.0","id":5,"method":"server/discover"}"#,
            &[("mcp-protocol-version", "2099-01-01")],
        )
        .await;
    let versions = json!(["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"]);
    assert_eq!(
        a.last()["error"]["data"],
        json!({"supported": versions, "requested": "2099-01-01"})
    );
    assert_eq!(a.last()["id"], 5);
    // 2026-07-28: discovery, and list results that say how long they may be kept.
    let modern = |method| {
        [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", method),
        ]
    };
    let a = w
        .post(
            "/mcp",
            me,
            r#"{"jsonrpc":"2.0","id":"d","method":"server/discover","params":{}}"#,
            &modern("server/discover"),
        )
        .await;
    let r = &a.last()["result"];
    assert_eq!(
        (r["resultType"].as_str(), &r["supportedVersions"]),
        (Some("complete"), &versions),
        "{a:?}"
    );
    assert_eq!(
        (r["ttlMs"].as_i64(), r["cacheScope"].as_str()),
        (Some(0), Some("private"))
    );
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "upper"
    );
    let a = w
        .post(
            "/mcp",
            me,
            r#"{"jsonrpc":"2.0","id":"l","method":"tools/list","params":{}}"#,
            &modern("tools/list"),
        )
        .await;
    let r = &a.last()["result"];
    assert_eq!(
        (
            r["resultType"].as_str(),
            r["ttlMs"].as_i64(),
            r["cacheScope"].as_str()
        ),
        (Some("complete"), Some(0), Some("private")),
        "{a:?}"
    );
    // No Tasks utility in this era: the tool says nothing of it.
    assert_eq!(r["tools"][0].get("execution"), None, "{a:?}");
    // No standalone stream, no sessions to end.
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let r = w
            .http
            .request(method.clone(), w.proxy.url("/mcp"))
            .bearer_auth(token("mcp-proto"))
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{method}");
    }
    // Without a token: 401 before JSON-RPC, even for initialize.
    let a = w
        .post(
            "/mcp",
            None,
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#,
            &[],
        )
        .await;
    assert_eq!(a.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tool_call_streams_progress_then_the_result_and_charges_each_step_once() {
    let w = world().await;
    let subject = "mcp-call";
    w.admin.grant(subject, 5).await;
    let a = w
        .call("/mcp", subject, 3, "upper", json!({"text": "hello world"}))
        .await;
    assert_eq!(
        (a.status, a.content_type.as_deref()),
        (200, Some("text/event-stream")),
        "{a:?}"
    );
    let (progress, rest) = a.messages.split_at(a.messages.len() - 1);
    assert!(!progress.is_empty(), "{a:?}");
    for (i, p) in progress.iter().enumerate() {
        assert_eq!(p["method"], "notifications/progress", "{a:?}");
        assert_eq!(p["params"]["progressToken"], 3);
        assert_eq!(
            p["params"]["progress"],
            i as u64 + 1,
            "progress increases: {a:?}"
        );
        assert!(p.get("id").is_none());
    }
    let result = &rest[0];
    assert_eq!(result["id"], 3);
    assert_eq!(result["result"]["isError"], false);
    assert_eq!(text_of(&result["result"]), "HELLO WORLD");
    let meta = &result["result"]["_meta"]["interlingua/task"];
    assert_eq!(meta["status"], "completed");
    // Hold 1, one capture per synthesized step, the rest released.
    w.admin.charged(subject, 5, 1).await;
    assert_eq!(
        ledger(&w.admin, subject).await,
        rows(&[("grant", 5), ("hold", 1), ("capture", 1), ("release", 0)])
    );
    // The same call in the 2026-07-28 era: its result says it is complete.
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "upper", "arguments": {"text": "modern"},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "upper"),
    ];
    let a = w
        .post("/mcp", Some(subject), &body.to_string(), &headers)
        .await;
    let result = &a.last()["result"];
    assert_eq!(
        (result["resultType"].as_str(), text_of(result)),
        (Some("complete"), "MODERN"),
        "{a:?}"
    );
    w.admin.charged(subject, 5, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tool_errors_are_results_and_protocol_errors_are_json_rpc_errors() {
    let w = world().await;
    let subject = "mcp-errors";
    w.admin.grant(subject, 5).await;
    // Arguments that do not fit the tool's schema: a tool error naming the problem (SEP-1303).
    let a = w
        .call("/mcp", subject, 4, "upper", json!({"mode": ["ok"]}))
        .await;
    assert_eq!(a.status, 200);
    assert_eq!(a.last()["result"]["isError"], true, "{a:?}");
    assert!(text_of(&a.last()["result"]).contains("text"), "{a:?}");
    // A job that fails: the agent's words, nothing charged.
    let a = w
        .call("/mcp", subject, 5, "upper", json!({"text": "x mode:fail"}))
        .await;
    let result = &a.last()["result"];
    assert_eq!(result["isError"], true, "{a:?}");
    assert_eq!(result["_meta"]["interlingua/task"]["status"], "failed");
    // An unknown task for a helper tool: a JSON-RPC error.
    let a = w
        .call(
            "/mcp",
            subject,
            6,
            "interlingua_task_get",
            json!({"task_id": "nope"}),
        )
        .await;
    assert_eq!(a.last()["error"]["code"], -32602, "{a:?}");
    w.admin.charged(subject, 5, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_input_required_names_the_task_and_the_helper_tools_finish_it() {
    let w = world().await;
    let subject = "mcp-input";
    w.admin.grant(subject, 5).await;
    let a = w
        .call(
            "/mcp",
            subject,
            7,
            "upper",
            json!({"text": "hello mode:input"}),
        )
        .await;
    let result = &a.last()["result"];
    assert_eq!(result["isError"], true, "{a:?}");
    let asked = &result["structuredContent"];
    assert_eq!(asked["status"], "input_required");
    assert_eq!(asked["input_request"]["required"], json!(["more"]));
    let task = asked["task_id"]
        .as_str()
        .expect("the task's id")
        .to_string();
    assert!(text_of(result).contains("interlingua_task_input"), "{a:?}");
    assert!(text_of(result).contains(&task));
    // Answering it ends the call with the result.
    let a = w
        .call(
            "/mcp",
            subject,
            8,
            "interlingua_task_input",
            json!({"task_id": task, "input": {"more": "please"}}),
        )
        .await;
    let result = &a.last()["result"];
    assert_eq!(result["isError"], false, "{a:?}");
    assert_eq!(text_of(result), "HELLO MODE:INPUT please");
    // An ended task cannot be cancelled.
    let a = w
        .call(
            "/mcp",
            subject,
            9,
            "interlingua_task_cancel",
            json!({"task_id": task}),
        )
        .await;
    assert_eq!(a.last()["error"]["code"], -32602, "{a:?}");
    w.admin.charged(subject, 5, 1).await;
}

/// A client's answer to interlingua's elicitation request `il~<task>~<n>`, a JSON-RPC response.
fn elicit_answer(task: &str, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": format!("il~{task}~1"), "result": result}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_posted_answers_are_taken_with_202_or_refused_with_an_http_error_naming_no_id() {
    let w = world().await;
    let subject = "mcp-answers";
    w.admin.grant(subject, 5).await;
    // A task waiting for input (this client cannot elicit: the call names the task).
    let a = w
        .call(
            "/mcp",
            subject,
            7,
            "upper",
            json!({"text": "hello mode:input"}),
        )
        .await;
    let task = a.last()["result"]["structuredContent"]["task_id"]
        .as_str()
        .expect("the task's id")
        .to_string();
    let accept = elicit_answer(
        &task,
        json!({"action": "accept", "content": {"more": "please"}}),
    );
    // Taken (Streamable HTTP: a response accepted is 202, no body).
    let a = w.post("/mcp", Some(subject), &accept, &[]).await;
    assert_eq!(
        (a.status, a.content_type.as_deref(), a.raw.as_str()),
        (202, None, ""),
        "{a:?}"
    );
    // The task has moved on: the same answer again cannot be taken. An HTTP error, its body a
    // JSON-RPC error with no id (the response has none to be answered by).
    let refused = |a: &Answer, status: u16, says: &str| {
        assert_eq!(
            (a.status, a.content_type.as_deref()),
            (status, Some("application/json")),
            "{a:?}"
        );
        let e = a.last();
        assert_eq!(e.get("id"), None, "{a:?}");
        assert_eq!(
            (e["jsonrpc"].as_str(), e["error"]["code"].as_i64()),
            (Some("2.0"), Some(-32602)),
            "{a:?}"
        );
        let message = e["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{a:?}");
    };
    let a = w.post("/mcp", Some(subject), &accept, &[]).await;
    refused(&a, 409, "is not waiting for input");
    // An answer for no task of this caller's.
    let other = elicit_answer(
        "00000000-0000-7000-8000-000000000000",
        json!({"action": "accept", "content": {"more": "x"}}),
    );
    let a = w.post("/mcp", Some(subject), &other, &[]).await;
    refused(&a, 404, "00000000-0000-7000-8000-000000000000");
    // The input reached the agent; the task ends, and a late decline cannot cancel it.
    let a = w
        .call(
            "/mcp",
            subject,
            8,
            "interlingua_task_get",
            json!({"task_id": task}),
        )
        .await;
    assert_eq!(
        text_of(&a.last()["result"]),
        "HELLO MODE:INPUT please",
        "{a:?}"
    );
    let decline = elicit_answer(&task, json!({"action": "decline"}));
    let a = w.post("/mcp", Some(subject), &decline, &[]).await;
    refused(&a, 409, "has already ended");
    w.admin.charged(subject, 5, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_question_left_unanswered_is_asked_once_and_the_call_ends_naming_the_task() {
    let w = world().await;
    let subject = "mcp-unanswered";
    w.admin.grant(subject, 5).await;
    let session = w
        .initialize("/mcp", subject, json!({"elicitation": {}}))
        .await;
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "upper", "arguments": {"text": "hello mode:input"}}});
    let headers = [
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    // The client never answers: the stream ends at the route's sync_timeout.
    let a = w
        .post("/mcp", Some(subject), &call.to_string(), &headers)
        .await;
    let asked: Vec<&Value> = a
        .messages
        .iter()
        .filter(|m| m["method"] == "elicitation/create")
        .collect();
    assert_eq!(asked.len(), 1, "{a:?}");
    let last = a.last();
    assert_eq!(
        (&last["id"], &last["result"]["isError"]),
        (&json!(3), &json!(false)),
        "{a:?}"
    );
    let handle = &last["result"]["structuredContent"];
    assert_eq!(handle["status"], "input_required", "{a:?}");
    // The question is still open: answered now, the task completes.
    let task = handle["task_id"].as_str().expect("the task").to_string();
    let answer = json!({"jsonrpc": "2.0", "id": asked[0]["id"],
        "result": {"action": "accept", "content": {"more": "please"}}});
    let a = w
        .post("/mcp", Some(subject), &answer.to_string(), &headers)
        .await;
    assert_eq!(a.status, 202, "{a:?}");
    let a = w
        .call(
            "/mcp",
            subject,
            4,
            "interlingua_task_get",
            json!({"task_id": task}),
        )
        .await;
    assert_eq!(
        text_of(&a.last()["result"]),
        "HELLO MODE:INPUT please",
        "{a:?}"
    );
    w.admin.charged(subject, 5, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_call_past_sync_timeout_names_the_task_and_helper_tools_follow_or_cancel_it() {
    let w = world().await;
    let subject = "mcp-slow";
    w.admin.grant(subject, 5).await;
    let a = w
        .call("/slow", subject, 10, "slow_upper", json!({"text": "slow"}))
        .await;
    let result = &a.last()["result"];
    assert_eq!(result["isError"], false, "{a:?}");
    assert_eq!(result["structuredContent"]["status"], "working");
    let task = result["structuredContent"]["task_id"]
        .as_str()
        .expect("task id")
        .to_string();
    assert!(text_of(result).contains("interlingua_task_get"), "{a:?}");
    // Followed until it ends, one sync_timeout at a time.
    let done = common::wait::eventually("the slow task to complete", || async {
        let a = w
            .call(
                "/slow",
                subject,
                11,
                "interlingua_task_get",
                json!({"task_id": task}),
            )
            .await;
        let r = a.last()["result"].clone();
        if r["_meta"]["interlingua/task"]["status"] == "completed" {
            Ok(r)
        } else {
            Err(r)
        }
    })
    .await;
    assert_eq!(text_of(&done), "SLOW");
    // A second task, cancelled while it runs: nothing charged for it.
    let a = w
        .call("/slow", subject, 12, "slow_upper", json!({"text": "never"}))
        .await;
    let task = a.last()["result"]["structuredContent"]["task_id"]
        .as_str()
        .expect("id")
        .to_string();
    let a = w
        .call(
            "/slow",
            subject,
            13,
            "interlingua_task_cancel",
            json!({"task_id": task}),
        )
        .await;
    let result = &a.last()["result"];
    assert_eq!(
        (
            result["isError"].as_bool(),
            &result["_meta"]["interlingua/task"]["status"]
        ),
        (Some(false), &json!("cancelled")),
        "{a:?}"
    );
    w.admin.charged(subject, 5, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tasks_result_sends_the_tasks_status_as_it_changes_then_its_result() {
    let w = world().await;
    let subject = "mcp-task-status";
    w.admin.grant(subject, 5).await;
    // A task-augmented call (2025-11-25 Tasks) answers at once with the task.
    let body = json!({"jsonrpc": "2.0", "id": 20, "method": "tools/call",
        "params": {"name": "slow_upper", "arguments": {"text": "later"}, "task": {"ttl": 60000}}});
    let a = w.post("/slow", Some(subject), &body.to_string(), &[]).await;
    let task = a.last()["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a CreateTaskResult: {a:?}"))
        .to_string();
    // tasks/result, asked while it works: the status the task is in, then its result.
    let body = json!({"jsonrpc": "2.0", "id": 21, "method": "tasks/result",
        "params": {"taskId": task}});
    let a = w.post("/slow", Some(subject), &body.to_string(), &[]).await;
    let (notes, last) = a.messages.split_at(a.messages.len() - 1);
    assert!(!notes.is_empty(), "{a:?}");
    for n in notes {
        assert_eq!(n["method"], "notifications/tasks/status", "{a:?}");
        assert_eq!(n["params"]["taskId"], task.as_str(), "{a:?}");
        assert!(n.get("id").is_none(), "a notification has no id: {a:?}");
    }
    assert_eq!(notes[0]["params"]["status"], "working", "{a:?}");
    assert_eq!(last[0]["id"], 21, "{a:?}");
    assert_eq!(text_of(&last[0]["result"]), "LATER", "{a:?}");
    assert_eq!(
        last[0]["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task.as_str()
    );
    w.admin.charged(subject, 5, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_get_stream_of_a_session_sends_its_callers_task_statuses_as_they_change() {
    let w = world().await;
    let (subject, other) = ("mcp-get-stream", "mcp-get-other");
    w.admin.grant(subject, 5).await;
    w.admin.grant(other, 5).await;
    let session = w.initialize("/slow", subject, json!({})).await;
    let get = |who: &str| {
        w.http
            .get(w.proxy.url("/slow"))
            .bearer_auth(token(who))
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25")
    };
    // Another caller's GET with this session: the session is unknown to them.
    let r = get(other).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let mut stream = get(subject).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(
        stream
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    // Two tasks start after the stream opened: the caller's, and another caller's.
    let start = |who: &'static str, id: u64| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "slow_upper", "arguments": {"text": who}, "task": {"ttl": 60000}}});
        let w = &w;
        async move {
            let a = w.post("/slow", Some(who), &body.to_string(), &[]).await;
            a.last()["result"]["task"]["taskId"]
                .as_str()
                .unwrap_or_else(|| panic!("a CreateTaskResult: {a:?}"))
                .to_string()
        }
    };
    let mine = start(subject, 1).await;
    let theirs = start(other, 2).await;
    // The stream says how the caller's task changes, until it has completed.
    let deadline = tokio::time::Instant::now() + common::DEADLINE;
    let (mut buffer, mut notes) = (String::new(), Vec::<Value>::new());
    while !notes.iter().any(|n| n["params"]["status"] == "completed") {
        let chunk = tokio::time::timeout_at(deadline, stream.chunk())
            .await
            .unwrap_or_else(|_| panic!("the task's completion on the GET stream: {notes:?}"))
            .expect("the stream goes on")
            .expect("the stream is open");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            if let Some(data) = event.trim_end().strip_prefix("data: ") {
                notes.push(serde_json::from_str(data).expect("an event is JSON"));
            }
        }
    }
    for n in &notes {
        assert_eq!(n["method"], "notifications/tasks/status", "{notes:?}");
        assert_eq!(
            n["params"]["taskId"],
            mine.as_str(),
            "only the caller's: {notes:?}"
        );
    }
    assert_ne!(mine, theirs);
    assert_eq!(notes[0]["params"]["status"], "working", "{notes:?}");
    w.admin.charged(subject, 5, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_stream_sends_a_heartbeat_while_the_task_does_not_change() {
    let w = world().await;
    let subject = "mcp-tick";
    w.admin.grant(subject, 5).await;
    let a = w
        .call("/tick", subject, 14, "ticking", json!({"text": "tick"}))
        .await;
    let progress: Vec<&Value> = a
        .messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    // The job runs 4 s in two states; a heartbeat every 300 ms makes many more events than
    // changes, each with a higher `progress`.
    assert!(progress.len() >= 6, "{a:?}");
    let counts: Vec<u64> = progress
        .iter()
        .filter_map(|p| p["params"]["progress"].as_u64())
        .collect();
    assert!(counts.windows(2).all(|w| w[1] == w[0] + 1), "{counts:?}");
    assert_eq!(text_of(&a.last()["result"]), "TICK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sessions_are_sealed_bound_to_their_caller_and_a_forged_state_is_refused() {
    let w = world().await;
    let session = w
        .initialize("/mcp", "mcp-session", json!({"elicitation": {}}))
        .await;
    assert!(session.chars().all(|c| c.is_ascii_graphic()), "{session}");
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let with = |s: &str| [("mcp-session-id", s.to_string())];
    // Its own caller may use it; another caller, or a forged or altered id, gets 404.
    let own = with(&session);
    let own: Vec<(&str, &str)> = own.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let a = w.post("/mcp", Some("mcp-session"), ping, &own).await;
    assert_eq!((a.status, &a.last()["result"]), (200, &json!({})), "{a:?}");
    let mut altered = session.clone();
    altered.insert(3, 'x');
    for (who, id) in [
        ("mcp-other", session.as_str()),
        ("mcp-session", "forged"),
        ("mcp-session", altered.as_str()),
    ] {
        let a = w
            .post("/mcp", Some(who), ping, &[("mcp-session-id", id)])
            .await;
        assert_eq!(
            (a.status, a.last()["error"]["code"].as_i64()),
            (404, Some(-32600)),
            "{who} {id}: {a:?}"
        );
        assert_eq!(a.last()["error"]["message"], "Session not found");
    }
    // Ending it is acknowledged.
    let r = w
        .http
        .delete(w.proxy.url("/mcp"))
        .bearer_auth(token("mcp-session"))
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // A 2026-07-28 retry whose requestState does not unseal is refused.
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "upper",
        "arguments": {"text": "x"}, "requestState": "not-a-state",
        "inputResponses": {"input-1": {"action": "accept", "content": {"more": "x"}}}}});
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "upper"),
    ];
    let a = w
        .post("/mcp", Some("mcp-session"), &body.to_string(), &headers)
        .await;
    assert_eq!(a.last()["error"]["code"], -32602, "{a:?}");
    assert_eq!(
        a.last()["error"]["message"],
        "Invalid or expired requestState"
    );
}
