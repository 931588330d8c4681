//! MCP as a back: routes whose upstream is an MCP server (Streamable HTTP, the 2025-11-25 era)
//! and whose `vars.mcp.tool` names one tool, reached from other fronts.
//!
//! The server is the official Python SDK's: `tests/peers/mcp_server2.py` (mcp 2.3.0, no Tasks:
//! each task one blocking call; `slow`, `fail`, `echo`) and `tests/peers/mcp_server1.py` (mcp
//! 1.30.0 with Tasks: each task an MCP task, polled; `slow`, `fail`, and the ids its tasks/cancel
//! saw), except where a test needs the server to do something on cue (a session that expires
//! between two calls): a scripted stand-in then plays the server's part on the wire.

mod common;

use std::sync::{Arc, Mutex};

use common::money::{ledger, paid_config, paid_route, rows, Admin};
use common::peers::{mcp1_python, mcp2_python, peers_python, run_json, Peer};
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

/// A Nevermined client's task on route `/nv` as `subject`, followed until it ends: every status
/// seen, the last body.
async fn nevermined_task(
    http: &reqwest::Client,
    proxy: &Proxy,
    subject: &str,
    body: Value,
) -> (Vec<String>, Value) {
    let tasks = format!("/nv/api/v1/agents/{DID}/tasks");
    let (status, created) = call(
        http,
        proxy,
        reqwest::Method::POST,
        &tasks,
        subject,
        Some(body),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["task"]["task_id"].as_str().expect("a task id");
    let path = format!("{tasks}/{id}");
    poll(
        http,
        proxy,
        &path,
        subject,
        "/task/task_status",
        &["Completed", "Failed"],
    )
    .await
}

/// A MIP-003 client's job on route `/mip` with `input_data`, as `subject`, followed until it
/// ends: its last status body.
async fn mip003_job(
    http: &reqwest::Client,
    proxy: &Proxy,
    subject: &str,
    input_data: Value,
) -> Value {
    let body = json!({"identifier_from_purchaser": "a1b2c3d4e5f6a7b8", "input_data": input_data});
    let (status, started) = call(
        http,
        proxy,
        reqwest::Method::POST,
        "/mip/start_job",
        subject,
        Some(body),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let job = started["job_id"].as_str().expect("a job id");
    let path = format!("/mip/status?job_id={job}");
    let (_, done) = poll(
        http,
        proxy,
        &path,
        subject,
        "/status",
        &["completed", "failed"],
    )
    .await;
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nevermined_task_over_an_mcp_tool_completes_with_its_text_and_pays_one_credit() {
    let server = sdk_server().await;
    let proxy = Proxy::start(&routes(server.port, &[("nv", "nevermined", "slow")]));
    let (admin, http) = (Admin::new(&proxy), client());
    admin.grant("nv-user", 10).await;
    let (seen, done) = nevermined_task(
        &http,
        &proxy,
        "nv-user",
        json!({"input_query": "two steps please", "input_additional": {"n": 2}}),
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
    let done = mip003_job(&http, &proxy, "mip-user", json!({})).await;
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
    let done = mip003_job(&http, &proxy, "json-user", json!({"text": "in json"})).await;
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
    let (_, done) = nevermined_task(
        &http,
        &proxy,
        "nv-user",
        json!({"input_query": "hello again"}),
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

// ---- Tasks: a server that offers task-augmented calls (mcp 1.30.0, `tests/peers/mcp_server1.py`)

/// The 1.30.0 server with Tasks, `slow` working `work` seconds in all.
async fn tasks_server(work: &'static str) -> Peer {
    tokio::task::spawn_blocking(move || {
        Peer::start(&mcp1_python(), "mcp_server1.py", &["--work", work], &[])
    })
    .await
    .expect("the MCP server started")
}

/// A paid route `name` from `front` to the tool `tool` of the server with Tasks at `port`, whose
/// exchanges may last at most 1 s (each of a task's calls; the task itself may last longer).
fn task_routes(port: u16, list: &[(&str, &str, &str)]) -> String {
    let mut rest = format!(
        "[[upstreams]]\nname = \"mcp\"\naddress = \"127.0.0.1:{port}\"\nread_timeout = \"1s\"\ntotal_timeout = \"1s\"\n"
    );
    for (name, front, tool) in list {
        rest.push_str(&paid_route(
            name,
            &format!("/{name}"),
            "mcp",
            front,
            "mcp",
            // The SDK's Starlette mount serves at /mcp/ (it redirects /mcp there with a 307).
            &format!(
                "sync_timeout = \"10s\"\nvars.mcp = {{ tool = \"{tool}\", endpoint = \"/mcp/\" }}\n"
            ),
        ));
    }
    paid_config(&rest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_run_as_an_mcp_task_outlasts_the_upstreams_timeout_and_completes_polled() {
    // 2 s of work against exchanges of at most 1 s: a blocking tools/call would time out (504);
    // a task-augmented one answers at once and tasks/get follows it.
    let server = tasks_server("2").await;
    let proxy = Proxy::start(&task_routes(server.port, &[("nv", "nevermined", "slow")]));
    let (admin, http) = (Admin::new(&proxy), client());
    admin.grant("nv-user", 10).await;
    let (seen, done) = nevermined_task(
        &http,
        &proxy,
        "nv-user",
        json!({"input_query": "four steps", "input_additional": {"n": 4}}),
    )
    .await;
    assert_eq!(done["task"]["task_status"], "Completed", "{seen:?} {done}");
    assert!(seen.contains(&"In_Progress".to_string()), "{seen:?}");
    // tasks/result's CallToolResult, fetched once tasks/get said completed.
    assert_eq!(done["task"]["output"], "done 4", "{done}");
    admin.charged("nv-user", 10, 1).await;
    assert_eq!(
        ledger(&admin, "nv-user").await,
        rows(&[("grant", 10), ("hold", 1), ("capture", 1), ("release", 0)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_mcp_task_and_arguments_the_server_refuses_fail_and_cost_nothing() {
    let server = tasks_server("0.4").await;
    let proxy = Proxy::start(&task_routes(
        server.port,
        &[("mip", "mip003", "fail"), ("nv", "nevermined", "slow")],
    ));
    let (admin, http) = (Admin::new(&proxy), client());
    admin.grant("mip-user", 10).await;
    let done = mip003_job(&http, &proxy, "mip-user", json!({"text": "that"})).await;
    assert_eq!(done["status"], "failed", "{done}");
    // The task's statusMessage (its work raised), as tasks/get said it.
    assert_eq!(done["message"], "cannot do 'that'", "{done}");
    admin.charged("mip-user", 10, 0).await;
    assert_eq!(
        ledger(&admin, "mip-user").await,
        rows(&[("grant", 10), ("hold", 1), ("release", 1)])
    );

    // Arguments the tool's schema refuses: the server answers the task-augmented call with a
    // failed result and makes no task; the task fails with its words.
    admin.grant("nv-user", 10).await;
    let (seen, done) = nevermined_task(
        &http,
        &proxy,
        "nv-user",
        json!({"input_query": "q", "input_additional": {"n": "many"}}),
    )
    .await;
    assert_eq!(done["task"]["task_status"], "Failed", "{seen:?} {done}");
    admin.charged("nv-user", 10, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_task_run_as_an_mcp_task_cancels_it_on_the_server() {
    let server = tasks_server("30").await;
    let proxy = Proxy::start(&task_routes(server.port, &[("a2a", "a2a", "slow")]));
    let (admin, http) = (Admin::new(&proxy), client());
    admin.grant("a2a-user", 10).await;
    let rpc = |method: &str, params: Value| json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let send = rpc(
        "message/send",
        json!({
            "message": {"role": "user", "messageId": "m-1", "parts": [{"kind": "data", "data": {"n": 30}}]},
            "configuration": {"blocking": false},
        }),
    );
    let (status, sent) = call(
        &http,
        &proxy,
        reqwest::Method::POST,
        "/a2a/",
        "a2a-user",
        Some(send),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(sent["result"]["status"]["state"], "working", "{sent}");
    let id = sent["result"]["id"]
        .as_str()
        .expect("a task id")
        .to_string();
    let cancel = rpc("tasks/cancel", json!({"id": id}));
    let (status, cancelled) = call(
        &http,
        &proxy,
        reqwest::Method::POST,
        "/a2a/",
        "a2a-user",
        Some(cancel),
    )
    .await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(
        cancelled["result"]["status"]["state"], "canceled",
        "{cancelled}"
    );
    // The server was told: its tasks/cancel saw one task (the server's own id for it).
    let seen: Value = reqwest::get(format!("http://127.0.0.1:{}/cancelled", server.port))
        .await
        .expect("the server's list of cancelled tasks")
        .json()
        .await
        .expect("JSON");
    let ids = seen.as_array().expect("an array");
    assert_eq!(ids.len(), 1, "{seen}");
    assert!(ids[0].as_str().is_some_and(|s| s.contains(':')), "{seen}");
    admin.charged("a2a-user", 10, 0).await;
    assert_eq!(
        ledger(&admin, "a2a-user").await,
        rows(&[("grant", 10), ("hold", 1), ("release", 1)])
    );
}
