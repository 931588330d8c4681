//! MCP as a back: routes whose upstream is an MCP server (Streamable HTTP, the 2025-11-25 era)
//! and whose `vars.mcp.tool` names one tool, reached from other fronts.
//!
//! The server is the official Python SDK's (`tests/peers/mcp_server2.py`, mcp 2.3.0: `slow`,
//! `fail`, `echo`), except where a test needs the server to do something on cue (a session that
//! expires between two calls): a scripted stand-in then plays the server's part on the wire.

mod common;

use std::sync::{Arc, Mutex};

use common::money::{ledger, paid_config, paid_route, rows, Admin};
use common::peers::{mcp2_python, peers_python, run_json, Peer};
use common::secrets::token;
use common::wait::states;
use common::{client, full, status_and_json, Proxy, Upstream, DEADLINE};
use http_body_util::BodyExt;
use serde_json::{json, Value};

const DID: &str = "did:nv:5392e8cdc5addec2b7384072fda166d42a5d4ab96ae6d311f516b6b324f24cec";

/// The SDK's server, `slow` working 0.4 s in all.
async fn sdk_server() -> Peer {
    sdk_server_with(&[]).await
}

/// The SDK's server with these arguments too.
async fn sdk_server_with(extra: &'static [&'static str]) -> Peer {
    tokio::task::spawn_blocking(move || {
        let mut args = vec!["--work", "0.4"];
        args.extend(extra);
        Peer::start(&mcp2_python(), "mcp_server2.py", &args, &[])
    })
    .await
    .expect("the MCP server started")
}

/// An upstream `mcp` at `port` and a paid route `name` from `front` to its tool `tool`.
fn routes(port: u16, list: &[(&str, &str, &str)]) -> String {
    let mut rest = format!("[[upstreams]]\nname = \"mcp\"\naddress = \"127.0.0.1:{port}\"\n");
    for (name, front, tool) in list {
        rest.push_str(&paid_route(
            name,
            &format!("/{name}"),
            "mcp",
            front,
            "mcp",
            &format!("sync_timeout = \"10s\"\nvars.mcp = {{ tool = \"{tool}\" }}\n"),
        ));
    }
    paid_config(&rest)
}

async fn call(
    http: &reqwest::Client,
    proxy: &Proxy,
    method: reqwest::Method,
    path: &str,
    subject: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = http
        .request(method, proxy.url(path))
        .bearer_auth(token(subject));
    if let Some(b) = body {
        req = req.json(&b);
    }
    status_and_json(req.send().await.expect("a request to interlingua")).await
}

/// Polls `path` until `field` of its body is one of `until`; every value seen, the last body.
async fn poll(
    http: &reqwest::Client,
    proxy: &Proxy,
    path: &str,
    subject: &str,
    field: &str,
    until: &[&str],
) -> (Vec<String>, Value) {
    let pointer = field.to_string();
    states(path, until, || async {
        let (status, body) = call(http, proxy, reqwest::Method::GET, path, subject, None).await;
        assert_eq!(status, 200, "{path}: {body}");
        let value = body
            .pointer(&pointer)
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string();
        (value, body)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nevermined_task_over_an_mcp_tool_completes_with_its_text_and_pays_one_credit() {
    let server = sdk_server().await;
    let proxy = Proxy::start(&routes(server.port, &[("nv", "nevermined", "slow")]));
    let (admin, http) = (Admin::new(&proxy), client());
    admin.grant("nv-user", 10).await;
    let tasks = format!("/nv/api/v1/agents/{DID}/tasks");
    let (status, created) = call(
        &http,
        &proxy,
        reqwest::Method::POST,
        &tasks,
        "nv-user",
        Some(json!({"input_query": "two steps please", "input_additional": {"n": 2}})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["task"]["task_id"].as_str().expect("a task id");
    let (seen, done) = poll(
        &http,
        &proxy,
        &format!("{tasks}/{id}"),
        "nv-user",
        "/task/task_status",
        &["Completed", "Failed"],
    )
    .await;
    assert_eq!(done["task"]["task_status"], "Completed", "{seen:?} {done}");
    assert_eq!(done["task"]["output"], "done 2", "{done}");
    // The tool's structuredContent is the task's structured output.
    assert_eq!(
        done["task"]["output_additional"]["result"], "done 2",
        "{done}"
    );
    admin.charged("nv-user", 10, 1).await;
    assert_eq!(
        ledger(&admin, "nv-user").await,
        rows(&[("grant", 10), ("hold", 1), ("capture", 1), ("release", 0)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mip003_job_over_a_failing_mcp_tool_fails_with_the_tools_words_and_costs_nothing() {
    let server = sdk_server().await;
    let proxy = Proxy::start(&routes(
        server.port,
        &[
            ("mip", "mip003", "fail"),
            ("mipslow", "mip003", "slow"),
            ("mipnone", "mip003", "no_such_tool"),
        ],
    ));
    let (admin, http) = (Admin::new(&proxy), client());
    admin.grant("mip-user", 10).await;
    let (status, started) = call(
        &http,
        &proxy,
        reqwest::Method::POST,
        "/mip/start_job",
        "mip-user",
        Some(json!({"identifier_from_purchaser": "a1b2c3d4e5f6a7b8", "input_data": {}})),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let job = started["job_id"].as_str().expect("a job id");
    let (_, done) = poll(
        &http,
        &proxy,
        &format!("/mip/status?job_id={job}"),
        "mip-user",
        "/status",
        &["completed", "failed"],
    )
    .await;
    assert_eq!(done["status"], "failed", "{done}");
    let message = done["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the tool failed on purpose"),
        "the ToolError's words: {done}"
    );
    admin.charged("mip-user", 10, 0).await;
    assert_eq!(
        ledger(&admin, "mip-user").await,
        rows(&[("grant", 10), ("hold", 1), ("release", 1)])
    );

    // The input schema a MIP-003 client reads is the tool's, translated from its JSON Schema.
    let (status, schema) = call(
        &http,
        &proxy,
        reqwest::Method::GET,
        "/mipslow/input_schema",
        "mip-user",
        None,
    )
    .await;
    assert_eq!(status, 200, "{schema}");
    let fields = schema["input_data"].as_array().expect("input_data");
    assert_eq!(fields.len(), 1, "{schema}");
    assert_eq!(fields[0]["id"], "n", "{schema}");
    assert_eq!(fields[0]["type"], "number", "{schema}");
    let (status, available) = call(
        &http,
        &proxy,
        reqwest::Method::GET,
        "/mipslow/availability",
        "mip-user",
        None,
    )
    .await;
    assert_eq!(status, 200, "{available}");
    assert_eq!(available["status"], "available", "{available}");
    // A tool the server does not list: the route's agent is not available.
    let (status, missing) = call(
        &http,
        &proxy,
        reqwest::Method::GET,
        "/mipnone/availability",
        "mip-user",
        None,
    )
    .await;
    assert_eq!(status, 200, "{missing}");
    assert_eq!(missing["status"], "unavailable", "{missing}");
    assert!(
        missing["message"]
            .as_str()
            .is_some_and(|m| m.contains("no tool named no_such_tool")),
        "{missing}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_a2a_sdks_client_gets_an_mcp_tools_answer_as_its_tasks_artifact() {
    let server = sdk_server().await;
    let proxy = Proxy::start(&routes(server.port, &[("a2a", "a2a", "echo")]));
    let admin = Admin::new(&proxy);
    admin.grant("a2a-user", 10).await;
    let args: Vec<String> = [
        "--url",
        &proxy.url("/a2a"),
        "--scenario",
        "complete",
        "--text",
        "hello over mcp",
        "--timeout",
        "15",
        "--token",
        &token("a2a-user"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = tokio::task::spawn_blocking(move || {
        run_json(&peers_python(), "a2a_client.py", &args, DEADLINE)
    })
    .await
    .expect("the A2A client ran");
    assert_eq!(out["final_state"], "TASK_STATE_COMPLETED", "{out}");
    // echo takes `text`: the message's text went there, and came back.
    assert_eq!(out["artifact_text"], "hello over mcp", "{out}");
    admin.charged("a2a-user", 10, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_answering_in_json_rather_than_events_is_read_the_same() {
    let server = sdk_server_with(&["--json-response"]).await;
    let proxy = Proxy::start(&routes(server.port, &[("mip", "mip003", "echo")]));
    let (admin, http) = (Admin::new(&proxy), client());
    admin.grant("json-user", 10).await;
    let (status, started) = call(
        &http,
        &proxy,
        reqwest::Method::POST,
        "/mip/start_job",
        "json-user",
        Some(json!({"identifier_from_purchaser": "a1b2c3d4e5f6a7b8", "input_data": {"text": "in json"}})),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let job = started["job_id"].as_str().expect("a job id");
    let (_, done) = poll(
        &http,
        &proxy,
        &format!("/mip/status?job_id={job}"),
        "json-user",
        "/status",
        &["completed", "failed"],
    )
    .await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"], "in json", "{done}");
    admin.charged("json-user", 10, 1).await;
}

/// What the scripted server saw: each JSON-RPC method with the session it was sent in.
type Calls = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// An MCP server on cue: sessions `s1`, `s2`, … one per initialize; answers in SSE; the first
/// tools/call in session `s1` finds the session gone (404), as a server that expired it would.
async fn expiring_server(calls: Calls) -> Upstream {
    let sessions = Arc::new(Mutex::new(0u32));
    Upstream::start(move |req: hyper::Request<hyper::body::Incoming>| {
        let (calls, sessions) = (calls.clone(), sessions.clone());
        async move {
            let session = req
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let accept = req
                .headers()
                .get("accept")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let body = req.into_body().collect().await.expect("a body").to_bytes();
            let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let method = msg["method"].as_str().unwrap_or_default().to_string();
            calls.lock().unwrap().push((method.clone(), session.clone()));
            let sse = |result: Value| {
                let data = json!({"jsonrpc": "2.0", "id": msg["id"], "result": result});
                hyper::Response::builder()
                    .status(200)
                    .header("content-type", "text/event-stream")
                    .body(full(format!("event: message\ndata: {data}\n\n")))
                    .unwrap()
            };
            if !(accept.contains("application/json") && accept.contains("text/event-stream")) {
                return hyper::Response::builder()
                    .status(406)
                    .body(full("Not Acceptable"))
                    .unwrap();
            }
            match method.as_str() {
                "initialize" => {
                    assert_eq!(msg["params"]["protocolVersion"], "2025-11-25", "{msg}");
                    assert_eq!(msg["params"]["capabilities"], json!({}), "{msg}");
                    let n = {
                        let mut s = sessions.lock().unwrap();
                        *s += 1;
                        *s
                    };
                    let mut r = sse(json!({"protocolVersion": "2025-11-25", "capabilities": {},
                        "serverInfo": {"name": "cue", "version": "1"}}));
                    r.headers_mut()
                        .insert("mcp-session-id", format!("s{n}").parse().unwrap());
                    r
                }
                "notifications/initialized" => hyper::Response::builder()
                    .status(202)
                    .body(full(""))
                    .unwrap(),
                "tools/list" => sse(json!({"tools": [{"name": "echo", "inputSchema":
                    {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]})),
                "tools/call" if session.as_deref() == Some("s1") => hyper::Response::builder()
                    .status(404)
                    .header("content-type", "application/json")
                    .body(full(
                        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found"}}"#,
                    ))
                    .unwrap(),
                "tools/call" => {
                    let text = msg["params"]["arguments"]["text"].as_str().unwrap_or("?");
                    sse(json!({"content": [{"type": "text", "text": text}], "isError": false}))
                }
                _ => hyper::Response::builder()
                    .status(400)
                    .body(full("unexpected"))
                    .unwrap(),
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_mcp_session_is_made_anew_and_the_call_made_once_more() {
    let calls: Calls = Arc::default();
    let server = expiring_server(calls.clone()).await;
    let proxy = Proxy::start(&routes(server.addr.port(), &[("nv", "nevermined", "echo")]));
    let (admin, http) = (Admin::new(&proxy), client());
    admin.grant("nv-user", 10).await;
    let tasks = format!("/nv/api/v1/agents/{DID}/tasks");
    let (status, created) = call(
        &http,
        &proxy,
        reqwest::Method::POST,
        &tasks,
        "nv-user",
        Some(json!({"input_query": "hello again"})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["task"]["task_id"].as_str().expect("a task id");
    let (_, done) = poll(
        &http,
        &proxy,
        &format!("{tasks}/{id}"),
        "nv-user",
        "/task/task_status",
        &["Completed", "Failed"],
    )
    .await;
    // The tool takes `text`: the task's text went there.
    assert_eq!(done["task"]["task_status"], "Completed", "{done}");
    assert_eq!(done["task"]["output"], "hello again", "{done}");
    let seen = calls.lock().unwrap().clone();
    let s = |v: &str| Some(v.to_string());
    assert_eq!(
        seen,
        [
            ("initialize".to_string(), None),
            ("notifications/initialized".to_string(), s("s1")),
            ("tools/list".to_string(), s("s1")),
            ("tools/call".to_string(), s("s1")),
            ("initialize".to_string(), None),
            ("notifications/initialized".to_string(), s("s2")),
            ("tools/list".to_string(), s("s2")),
            ("tools/call".to_string(), s("s2")),
        ]
    );
    admin.charged("nv-user", 10, 1).await;
}

/// The payments-py driver (`tests/peers/nevermined_client.py --scenario plain`) against `url`:
/// one task with `query` and `additional`, to its end; its report.
async fn payments_py(url: String, subject: &str, query: &str, additional: Value) -> Value {
    let args = vec![
        "--url".to_string(),
        url,
        "--key".to_string(),
        token(subject),
        "--did".to_string(),
        DID.to_string(),
        "--scenario".to_string(),
        "plain".to_string(),
        "--query".to_string(),
        query.to_string(),
        "--additional".to_string(),
        additional.to_string(),
    ];
    tokio::task::spawn_blocking(move || {
        run_json(&peers_python(), "nevermined_client.py", &args, DEADLINE * 3)
    })
    .await
    .expect("the driver's thread")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payments_py_reaches_an_mcp_tool_as_a_nevermined_agent_completed_or_failed() {
    let server = sdk_server().await;
    let proxy = Proxy::start(&routes(
        server.port,
        &[
            ("nvecho", "nevermined", "echo"),
            ("nvfail", "nevermined", "fail"),
        ],
    ));
    let admin = Admin::new(&proxy);
    admin.grant("py-user", 10).await;
    // The query is the tool's `text` argument; its answer the task's output.
    let out = payments_py(proxy.url("/nvecho"), "py-user", "hello tool", json!({})).await;
    let done = &out["get_task_with_steps_done"];
    assert_eq!(done["task"]["task_status"], "Completed", "{out}");
    assert_eq!(done["task"]["output"], "hello tool", "{out}");
    // A tool error is a failed task, with the tool's words, and costs nothing.
    let out = payments_py(proxy.url("/nvfail"), "py-user", "x", json!({})).await;
    let done = &out["get_task_with_steps_done"];
    assert_eq!(done["task"]["task_status"], "Failed", "{out}");
    assert!(
        done.to_string().contains("the tool failed on purpose"),
        "{out}"
    );
    admin.charged("py-user", 10, 1).await;
}
