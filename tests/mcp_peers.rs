//! The MCP peers against each other, without interlingua: the contract the MCP tests rely on.
//!
//! The official MCP Python SDK in its two lines, each in its own virtualenv (both import as
//! `mcp`; `tests/common/peers.rs`):
//!
//! | script | SDK | role |
//! |---|---|---|
//! | `tests/peers/mcp_client2.py` | mcp 2.3.0 `Client` | client, both eras (`--mode legacy\|auto\|2026-07-28`) |
//! | `tests/peers/mcp_server2.py` | mcp 2.3.0 `MCPServer` | server, both eras: `slow`, `fail`, `echo`, `ask` |
//! | `tests/peers/mcp_client1.py` | mcp 1.30.0 `ClientSession` | client, initialize era, experimental Tasks |
//! | `tests/peers/mcp_server1.py` | mcp 1.30.0 lowlevel `Server` | server with Tasks: `slow`, `ask`, `fail`; `GET /cancelled` |
//!
//! Each client prints one JSON object (its docstring has the shape): the negotiated version, the
//! tools, the call's result, the progress and elicitation requests seen, the task statuses seen,
//! and the error if any. These tests pin that output, so that a test through interlingua can
//! compare it with what the SDK's own server gives.

mod common;

use std::path::Path;

use common::peers::{mcp1_python, mcp2_python, run_json, Peer};
use common::DEADLINE;
use serde_json::{json, Value};

/// How long `slow` works in all: long enough that a task is polled while it runs (the 1.30.0
/// client polls every 500 ms), short enough for a quick test.
const WORK: &str = "1.2";

/// Where `mcp_server1.py` serves: its Starlette mount answers `/mcp` with a 307 to this, and it
/// prints `PATH=/mcp/` to say so.
const SERVER1_PATH: &str = "/mcp/";

/// Runs an MCP client script to its end (within [`DEADLINE`]; the script itself gives up after
/// 15 s) and returns the JSON object it printed.
fn client(python: &Path, script: &str, url: &str, args: &[&str]) -> Value {
    let mut all: Vec<String> = vec!["--url".into(), url.into(), "--timeout".into(), "15".into()];
    all.extend(args.iter().map(|s| s.to_string()));
    run_json(python, script, &all, DEADLINE)
}

fn server2(extra: &[&str]) -> (Peer, String) {
    let mut args = vec!["--work", WORK];
    args.extend(extra);
    let peer = Peer::start(&mcp2_python(), "mcp_server2.py", &args, &[]);
    let url = format!("http://127.0.0.1:{}/mcp", peer.port);
    (peer, url)
}

fn server1() -> (Peer, String) {
    let peer = Peer::start(&mcp1_python(), "mcp_server1.py", &["--work", WORK], &[]);
    let url = format!("http://127.0.0.1:{}{SERVER1_PATH}", peer.port);
    (peer, url)
}

fn tool_names(out: &Value) -> Vec<&str> {
    out["tools"]
        .as_array()
        .map(|tools| tools.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default()
}

/// The text of the result's content blocks, joined.
fn result_text(out: &Value) -> String {
    out["result"]["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("")
        })
        .unwrap_or_default()
}

fn statuses(out: &Value) -> Vec<&str> {
    out["statuses"]
        .as_array()
        .map(|s| s.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn sdk2_client_in_legacy_mode_calls_a_tool_with_progress() {
    let (_server, url) = server2(&[]);
    let out = client(
        &mcp2_python(),
        "mcp_client2.py",
        &url,
        &["--mode", "legacy", "--call", "slow", "--args", r#"{"n":2}"#],
    );
    assert_eq!(out["error"], Value::Null, "{out}");
    assert_eq!(out["protocol_version"], "2025-11-25", "{out}");
    assert_eq!(out["server_name"], "peer", "{out}");
    assert_eq!(tool_names(&out), ["slow", "fail", "echo", "ask"], "{out}");
    let slow = &out["tools"][0];
    assert_eq!(slow["inputSchema"]["required"], json!(["n"]), "{out}");
    assert_eq!(slow["inputSchema"]["properties"]["n"]["type"], "integer");
    // A `str` return gives an outputSchema, so the result must carry structuredContent.
    assert_eq!(slow["outputSchema"]["required"], json!(["result"]), "{out}");
    assert_eq!(result_text(&out), "done 2", "{out}");
    assert_eq!(out["result"]["isError"], false, "{out}");
    assert_eq!(
        out["result"]["structuredContent"],
        json!({"result": "done 2"})
    );
    assert_eq!(
        out["progress"],
        json!([
            {"progress": 1.0, "total": 2.0, "message": "step 1"},
            {"progress": 2.0, "total": 2.0, "message": "step 2"},
        ]),
        "{out}"
    );
    assert_eq!(out["elicitations"], json!([]));
}

#[test]
fn sdk2_client_sees_a_tool_error_as_is_error_not_as_an_error() {
    let (_server, url) = server2(&[]);
    let out = client(&mcp2_python(), "mcp_client2.py", &url, &["--call", "fail"]);
    assert_eq!(out["error"], Value::Null, "{out}");
    assert_eq!(out["result"]["isError"], true, "{out}");
    assert!(
        result_text(&out).contains("the tool failed on purpose"),
        "{out}"
    );
}

#[test]
fn sdk2_client_in_auto_mode_negotiates_2026_07_28() {
    let (_server, url) = server2(&[]);
    let out = client(
        &mcp2_python(),
        "mcp_client2.py",
        &url,
        &[
            "--mode",
            "auto",
            "--call",
            "echo",
            "--args",
            r#"{"text":"hi"}"#,
        ],
    );
    assert_eq!(out["error"], Value::Null, "{out}");
    assert_eq!(out["protocol_version"], "2026-07-28", "{out}");
    assert_eq!(result_text(&out), "hi", "{out}");
    assert_eq!(out["result"]["isError"], false, "{out}");
}

/// Elicitation in both eras: `elicitation/create` mid-call (legacy), an `InputRequiredResult`
/// retried by the SDK (2026-07-28); the same record either way. Without a callback the client
/// declares no elicitation capability and the server refuses the call.
#[test]
fn sdk2_client_answers_elicitation_in_both_eras_and_only_with_a_callback() {
    let (_server, url) = server2(&[]);
    let python = mcp2_python();
    let ask = ["--call", "ask", "--args", r#"{"text":"hi"}"#];
    for mode in ["legacy", "2026-07-28"] {
        let mut args = vec!["--mode", mode, "--elicit", r#"{"more":"there"}"#];
        args.extend(ask);
        let out = client(&python, "mcp_client2.py", &url, &args);
        assert_eq!(out["error"], Value::Null, "{mode}: {out}");
        assert_eq!(result_text(&out), "HI there", "{mode}: {out}");
        let seen = &out["elicitations"];
        assert_eq!(seen.as_array().map(Vec::len), Some(1), "{mode}: {out}");
        assert_eq!(seen[0]["message"], "more for 'hi'?", "{mode}: {out}");
        assert_eq!(seen[0]["requestedSchema"]["required"], json!(["more"]));

        let mut args = vec!["--mode", mode, "--decline"];
        args.extend(ask);
        let out = client(&python, "mcp_client2.py", &url, &args);
        assert_eq!(out["result"]["isError"], true, "{mode}: {out}");
        assert!(result_text(&out).contains("the client declined"), "{out}");

        let mut args = vec!["--mode", mode];
        args.extend(ask);
        let out = client(&python, "mcp_client2.py", &url, &args);
        assert_eq!(out["result"], Value::Null, "{mode}: {out}");
        assert_eq!(out["elicitations"], json!([]), "{mode}: {out}");
        assert_eq!(out["error"]["type"], "MCPError", "{mode}: {out}");
        assert_eq!(out["error"]["code"], -32021, "{mode}: {out}");
    }
}

#[test]
fn sdk1_client_runs_a_tool_as_a_task_polled_to_completed() {
    let (_server, url) = server1();
    let out = client(
        &mcp1_python(),
        "mcp_client1.py",
        &url,
        &[
            "--task",
            "--call",
            "slow",
            "--args",
            r#"{"n":3}"#,
            "--list-tasks",
        ],
    );
    assert_eq!(out["error"], Value::Null, "{out}");
    assert_eq!(out["protocol_version"], "2025-11-25", "{out}");
    assert_eq!(out["server_name"], "peer", "{out}");
    assert_eq!(tool_names(&out), ["slow", "ask", "fail"], "{out}");
    assert_eq!(
        out["tools"][0]["execution"],
        json!({"taskSupport": "optional"})
    );
    assert_eq!(statuses(&out), ["working", "completed"], "{out}");
    assert_eq!(result_text(&out), "done 3", "{out}");
    assert_eq!(out["result"]["isError"], false, "{out}");
    let task_id = out["task_id"].as_str().unwrap_or_default();
    assert!(!task_id.is_empty(), "{out}");
    assert_eq!(out["listed"], json!([task_id]), "{out}");
}

#[test]
fn sdk1_client_calls_a_tool_inline_with_progress() {
    let (_server, url) = server1();
    let out = client(
        &mcp1_python(),
        "mcp_client1.py",
        &url,
        &["--call", "slow", "--args", r#"{"n":2}"#],
    );
    assert_eq!(out["error"], Value::Null, "{out}");
    assert_eq!(result_text(&out), "done 2", "{out}");
    assert_eq!(out["progress"].as_array().map(Vec::len), Some(2), "{out}");
    assert_eq!(out["task_id"], Value::Null, "{out}");
    assert_eq!(statuses(&out), Vec::<&str>::new(), "{out}");
}

/// A task that elicits goes `input_required`; the client's `tasks/result` then carries the
/// elicitation to the callback, and its answer completes the task.
#[test]
fn sdk1_task_in_input_required_gets_its_answer_through_tasks_result() {
    let (_server, url) = server1();
    let out = client(
        &mcp1_python(),
        "mcp_client1.py",
        &url,
        &[
            "--task",
            "--call",
            "ask",
            "--args",
            r#"{"text":"hi"}"#,
            "--elicit",
            r#"{"more":"there"}"#,
        ],
    );
    assert_eq!(out["error"], Value::Null, "{out}");
    assert_eq!(
        statuses(&out),
        ["working", "input_required", "completed"],
        "{out}"
    );
    assert_eq!(out["elicitations"][0]["message"], "more for 'hi'?", "{out}");
    assert_eq!(result_text(&out), "HI there", "{out}");
}

#[test]
fn sdk1_task_cancelled_once_refuses_a_second_cancel() {
    let (_server, url) = server1();
    let out = client(
        &mcp1_python(),
        "mcp_client1.py",
        &url,
        &[
            "--task",
            "--cancel",
            "--call",
            "slow",
            "--args",
            r#"{"n":3}"#,
        ],
    );
    assert_eq!(out["error"], Value::Null, "{out}");
    assert_eq!(out["cancelled_status"], "cancelled", "{out}");
    assert_eq!(out["second_cancel_error"]["code"], -32602, "{out}");
    assert_eq!(statuses(&out), ["working", "cancelled"], "{out}");
    assert_eq!(out["result"], Value::Null, "{out}");
}

/// The upstream of interlingua's stateless-JSON case: with `--json-response
/// --stateless` the initialize-era leg has no session and no stream, so a call still completes
/// (without progress) but a tool that elicits cannot ask: -32600.
#[test]
fn sdk2_server_stateless_json_serves_calls_but_has_no_back_channel() {
    let (_server, url) = server2(&["--json-response", "--stateless"]);
    let python = mcp2_python();
    let out = client(
        &python,
        "mcp_client2.py",
        &url,
        &["--call", "slow", "--args", r#"{"n":2}"#],
    );
    assert_eq!(out["error"], Value::Null, "{out}");
    assert_eq!(out["protocol_version"], "2025-11-25", "{out}");
    assert_eq!(result_text(&out), "done 2", "{out}");
    assert_eq!(out["progress"], json!([]), "{out}");
    let out = client(
        &python,
        "mcp_client2.py",
        &url,
        &[
            "--call",
            "ask",
            "--args",
            r#"{"text":"a"}"#,
            "--elicit",
            r#"{"more":"b"}"#,
        ],
    );
    assert_eq!(out["result"], Value::Null, "{out}");
    assert_eq!(out["error"]["code"], -32600, "{out}");
}
