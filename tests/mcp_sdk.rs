//! MCP against the real thing: the official MCP Python SDK as the client of interlingua's `mcp`
//! face, in both lines MCP.md names, each in its own virtualenv (`tests/common/peers.rs`):
//!
//! - mcp 2.3.0 `Client` (`tests/peers/mcp_client2.py`), in `legacy` mode and in its default
//!   `auto` mode (which asks `server/discover` at 2026-07-28 first and falls back to
//!   `initialize`);
//! - mcp 1.30.0 `ClientSession` (`tests/peers/mcp_client1.py`), plain and with its experimental
//!   Tasks (`call_tool_as_task`, `poll_task`, `get_task_result`, `list_tasks`, `cancel_task`).
//!
//! The agents behind interlingua are real too: the `masumi` 1.2.0 package as a MIP-003 agent (with
//! the payment node stand-in it waits on) and the `a2a-sdk` 1.3.0 agent, besides interlingua's
//! sample MIP-003 agent for the timing-sensitive cases. Every route is paid: the ledger shows one
//! hold, a capture per completed step and the release, whatever the client.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::money::{paid_config, paid_route, Admin};
use common::peers::{masumi_agent, mcp1_python, mcp2_python, peers_python, run_json, Peer};
use common::secrets::token;
use common::{sample_agent, Proxy, DEADLINE};
use serde_json::{json, Value};

/// How long a job takes on the sample agent and on the SDK's A2A agent.
const WORK: Duration = Duration::from_millis(1200);
/// Long enough that a client cancels the task while it runs.
const SLOW_WORK: Duration = Duration::from_secs(6);

struct World {
    proxy: Proxy,
    admin: Admin,
    _peers: Vec<Peer>,
}

/// The real agents and a proxy with an `mcp` route to each (tool name = route name):
///
/// | prefix | tool | back | agent |
/// |---|---|---|---|
/// | `/mip` | `upper` | mip003 | interlingua's sample agent, jobs of [`WORK`] |
/// | `/slow` | `slow_upper` | mip003 | the sample agent, jobs of [`SLOW_WORK`] |
/// | `/masumi` | `masumi_agent` | mip003 | the `masumi` 1.2.0 package |
/// | `/a2a` | `a2a_agent` | a2a | the `a2a-sdk` 1.3.0 agent |
async fn world() -> World {
    let python = tokio::task::spawn_blocking(peers_python).await.unwrap();
    let peers = tokio::task::spawn_blocking(move || {
        let standin = Peer::start(&python, "payment_standin.py", &[], &[]);
        let masumi = masumi_agent(&python, standin.port);
        let work = format!("{}", WORK.as_secs_f64());
        let a2a = Peer::start(
            &python,
            "a2a_agent.py",
            &["--work", &work, "--port", "0"],
            &[],
        );
        vec![standin, masumi, a2a]
    })
    .await
    .unwrap();
    let mip = sample_agent(samples::mip003::serve, WORK).await;
    let slow = sample_agent(samples::mip003::serve, SLOW_WORK).await;
    let mut rest = format!(
        "[[upstreams]]\nname = \"mip\"\naddress = \"{mip}\"\n\n\
         [[upstreams]]\nname = \"slow\"\naddress = \"{slow}\"\n\n\
         [[upstreams]]\nname = \"masumi\"\naddress = \"127.0.0.1:{}\"\nread_timeout = \"10s\"\n\n\
         [[upstreams]]\nname = \"a2a\"\naddress = \"127.0.0.1:{}\"\nread_timeout = \"10s\"\n",
        peers[1].port, peers[2].port
    );
    for (name, prefix, upstream, back) in [
        ("upper", "/mip", "mip", "mip003"),
        ("slow_upper", "/slow", "slow", "mip003"),
        ("masumi_agent", "/masumi", "masumi", "mip003"),
        ("a2a_agent", "/a2a", "a2a", "a2a"),
    ] {
        rest.push_str(&paid_route(
            name,
            prefix,
            upstream,
            "mcp",
            back,
            "sync_timeout = \"20s\"",
        ));
    }
    let proxy = Proxy::start(&paid_config(&rest));
    World {
        admin: Admin::new(&proxy),
        proxy,
        _peers: peers,
    }
}

impl World {
    /// Runs an SDK client script (`mcp_client2.py` or `mcp_client1.py`) against `prefix` as
    /// `subject` (no token if `None`) with `args`, and returns the JSON object it printed.
    async fn sdk(&self, v1: bool, prefix: &str, subject: Option<&str>, args: &[&str]) -> Value {
        let (python, script): (PathBuf, &str) = if v1 {
            (
                tokio::task::spawn_blocking(mcp1_python).await.unwrap(),
                "mcp_client1.py",
            )
        } else {
            (
                tokio::task::spawn_blocking(mcp2_python).await.unwrap(),
                "mcp_client2.py",
            )
        };
        let mut all: Vec<String> = vec![
            "--url".into(),
            self.proxy.url(prefix),
            "--timeout".into(),
            "40".into(),
        ];
        if let Some(s) = subject {
            all.extend(["--token".to_string(), token(s)]);
        }
        all.extend(args.iter().map(|s| s.to_string()));
        tokio::task::spawn_blocking(move || run_json(&python, script, &all, DEADLINE))
            .await
            .unwrap()
    }
}

fn text(out: &Value) -> String {
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

fn names(out: &Value) -> Vec<&str> {
    out["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk2_client_lists_and_calls_the_tool_of_each_agent_with_progress_and_pays_per_step() {
    let w = world().await;
    let cases = [
        (
            "/mip",
            "upper",
            json!({"text": "hello world"}),
            "HELLO WORLD",
        ),
        (
            "/masumi",
            "masumi_agent",
            json!({"text": "hello masumi"}),
            "HELLO MASUMI",
        ),
        (
            "/a2a",
            "a2a_agent",
            json!({"text": "hello a2a"}),
            "HELLO A2A",
        ),
    ];
    for (prefix, tool, args, expected) in cases {
        let subject = format!("sdk2{}", prefix.replace('/', "-"));
        w.admin.grant(&subject, 5).await;
        for mode in ["legacy", "auto"] {
            let args = args.to_string();
            let out = w
                .sdk(
                    false,
                    prefix,
                    Some(&subject),
                    &["--mode", mode, "--call", tool, "--args", &args],
                )
                .await;
            assert_eq!(out["error"], Value::Null, "{prefix} {mode}: {out}");
            // `auto` asks server/discover and takes the modern era; `legacy` initializes.
            let era = if mode == "auto" {
                "2026-07-28"
            } else {
                "2025-11-25"
            };
            assert_eq!(out["protocol_version"], era, "{out}");
            assert_eq!(out["server_name"], tool, "{out}");
            assert_eq!(
                names(&out),
                [
                    tool,
                    "interlingua_task_get",
                    "interlingua_task_input",
                    "interlingua_task_cancel"
                ],
                "{out}"
            );
            assert_eq!(out["tools"][0]["inputSchema"]["type"], "object", "{out}");
            assert_eq!(out["result"]["isError"], false, "{prefix} {mode}: {out}");
            assert_eq!(text(&out), expected, "{out}");
            // Progress came as the task went, before the result (masumi's jobs end before a
            // first look may find them running).
            assert!(
                prefix == "/masumi" || !out["progress"].as_array().is_some_and(Vec::is_empty),
                "{out}"
            );
        }
        // Two tasks, each one hold and one step captured.
        w.admin.charged(&subject, 5, 2).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk2_client_gets_tool_errors_as_results_and_finishes_an_input_round_with_a_helper_tool() {
    let w = world().await;
    let subject = "sdk2-input";
    w.admin.grant(subject, 5).await;
    // A failing job: a result with isError, the agent's words, nothing charged.
    let out = w
        .sdk(
            false,
            "/masumi",
            Some(subject),
            &[
                "--call",
                "masumi_agent",
                "--args",
                r#"{"text":"x","mode":"fail"}"#,
            ],
        )
        .await;
    assert_eq!(out["error"], Value::Null, "{out}");
    assert_eq!(out["result"]["isError"], true, "{out}");
    // Input required, and the client cannot elicit: a tool error naming what is needed and the
    // helper tool; structured content carries the task.
    let out = w
        .sdk(
            false,
            "/mip",
            Some(subject),
            &[
                "--call",
                "upper",
                "--args",
                r#"{"text":"hello mode:input"}"#,
            ],
        )
        .await;
    assert_eq!(out["result"]["isError"], true, "{out}");
    assert!(text(&out).contains("interlingua_task_input"), "{out}");
    let task = out["result"]["structuredContent"]["task_id"]
        .as_str()
        .expect("the task")
        .to_string();
    let answer = json!({"task_id": task, "input": {"more": "please"}}).to_string();
    let out = w
        .sdk(
            false,
            "/mip",
            Some(subject),
            &["--call", "interlingua_task_input", "--args", &answer],
        )
        .await;
    assert_eq!(out["result"]["isError"], false, "{out}");
    assert_eq!(text(&out), "HELLO MODE:INPUT please", "{out}");
    w.admin.charged(subject, 5, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk1_client_calls_plainly_and_as_a_task_polled_to_completion_and_lists_its_own_tasks() {
    let w = world().await;
    let subject = "sdk1-task";
    w.admin.grant(subject, 10).await;
    let out = w
        .sdk(
            true,
            "/a2a",
            Some(subject),
            &["--call", "a2a_agent", "--args", r#"{"text":"plain call"}"#],
        )
        .await;
    assert_eq!(out["error"], Value::Null, "{out}");
    assert_eq!(out["protocol_version"], "2025-11-25", "{out}");
    assert_eq!(out["result"]["isError"], false, "{out}");
    assert_eq!(text(&out), "PLAIN CALL", "{out}");
    for (prefix, tool) in [
        ("/mip", "upper"),
        ("/masumi", "masumi_agent"),
        ("/a2a", "a2a_agent"),
    ] {
        let out = w
            .sdk(
                true,
                prefix,
                Some(subject),
                &[
                    "--task",
                    "--call",
                    tool,
                    "--args",
                    r#"{"text":"as a task"}"#,
                    "--await-status",
                    "10",
                    "--list-tasks",
                ],
            )
            .await;
        assert_eq!(out["error"], Value::Null, "{prefix}: {out}");
        assert_eq!(
            out["tools"][0]["execution"],
            json!({"taskSupport": "optional"}),
            "{out}"
        );
        let statuses: Vec<&str> = out["statuses"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(statuses.last(), Some(&"completed"), "{prefix}: {out}");
        assert!(
            statuses
                .iter()
                .all(|s| ["working", "completed"].contains(s)),
            "{out}"
        );
        assert_eq!(out["result"]["isError"], false, "{out}");
        assert_eq!(text(&out), "AS A TASK", "{out}");
        // The session's GET stream told the SDK how the task went; its ending among it.
        let notes = out["status_notes"].as_array().unwrap();
        assert!(
            notes.iter().all(|n| n["taskId"] == out["task_id"]),
            "{prefix}: {out}"
        );
        assert!(
            notes.iter().any(|n| n["status"] == "completed"),
            "{prefix}: {out}"
        );
        // The list holds this subject's tasks on this route only.
        let listed = out["listed"].as_array().unwrap();
        assert!(listed.contains(&out["task_id"]), "{out}");
    }
    // Another subject sees none of them.
    let out = w
        .sdk(true, "/mip", Some("sdk1-other"), &["--list-tasks"])
        .await;
    assert_eq!(out["listed"], json!([]), "{out}");
    w.admin.charged(subject, 10, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk1_client_cancels_a_running_task_and_a_second_cancel_is_refused() {
    let w = world().await;
    let subject = "sdk1-cancel";
    w.admin.grant(subject, 5).await;
    let out = w
        .sdk(
            true,
            "/slow",
            Some(subject),
            &[
                "--task",
                "--cancel",
                "--call",
                "slow_upper",
                "--args",
                r#"{"text":"stop me"}"#,
            ],
        )
        .await;
    assert_eq!(out["cancelled_status"], "cancelled", "{out}");
    assert_eq!(out["second_cancel_error"]["code"], -32602, "{out}");
    w.admin.charged(subject, 5, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_clients_without_a_token_are_refused() {
    let w = world().await;
    for v1 in [false, true] {
        let out = w
            .sdk(
                v1,
                "/mip",
                None,
                &["--call", "upper", "--args", r#"{"text":"x"}"#],
            )
            .await;
        assert_eq!(out["result"], Value::Null, "{out}");
        assert!(!out["error"].is_null(), "{out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_clients_answer_the_agents_question_by_elicitation_in_both_eras_and_in_a_task() {
    let w = world().await;
    let subject = "sdk-elicit";
    w.admin.grant(subject, 10).await;
    let ask = [
        "--call",
        "upper",
        "--args",
        r#"{"text":"hello mode:input"}"#,
    ];
    // 2.3.0: a legacy session's client declared elicitation: the question comes on the call's
    // stream; 2026-07-28: as an input_required result the SDK answers by calling again.
    for mode in ["legacy", "2026-07-28"] {
        let mut args = vec!["--mode", mode, "--elicit", r#"{"more":"please"}"#];
        args.extend(ask);
        let out = w.sdk(false, "/mip", Some(subject), &args).await;
        assert_eq!(out["error"], Value::Null, "{mode}: {out}");
        assert_eq!(text(&out), "HELLO MODE:INPUT please", "{mode}: {out}");
        let seen = out["elicitations"].as_array().expect("elicitations");
        assert_eq!(seen.len(), 1, "{mode}: {out}");
        assert_eq!(
            seen[0]["requestedSchema"]["required"],
            json!(["more"]),
            "{out}"
        );
        assert_eq!(
            seen[0]["message"], "The agent needs more input: More details",
            "{out}"
        );
    }
    // The masumi package asks through its own human-in-the-loop call: the same question reaches
    // the client by elicitation, and the answer reaches masumi.
    let out = w
        .sdk(
            false,
            "/masumi",
            Some(subject),
            &[
                "--elicit",
                r#"{"more":"from masumi"}"#,
                "--call",
                "masumi_agent",
                "--args",
                r#"{"text":"hi","mode":"input"}"#,
            ],
        )
        .await;
    assert_eq!(out["error"], Value::Null, "{out}");
    assert_eq!(text(&out), "HI from masumi", "{out}");
    assert_eq!(
        out["elicitations"][0]["requestedSchema"]["required"],
        json!(["more"]),
        "{out}"
    );
    // Declined: the task is cancelled and the call says so.
    let mut args = vec!["--mode", "legacy", "--decline"];
    args.extend(ask);
    let out = w.sdk(false, "/mip", Some(subject), &args).await;
    assert_eq!(out["result"]["isError"], true, "{out}");
    assert_eq!(text(&out), "The task was cancelled.", "{out}");
    // 1.30.0 Tasks: the poll sees input_required, tasks/result carries the question.
    let out = w
        .sdk(
            true,
            "/mip",
            Some(subject),
            &[
                "--task",
                "--elicit",
                r#"{"more":"please"}"#,
                "--call",
                "upper",
                "--args",
                r#"{"text":"hello mode:input"}"#,
            ],
        )
        .await;
    assert_eq!(out["error"], Value::Null, "{out}");
    let statuses: Vec<&str> = out["statuses"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(statuses.contains(&"input_required"), "{out}");
    assert_eq!(statuses.last(), Some(&"completed"), "{out}");
    assert_eq!(text(&out), "HELLO MODE:INPUT please", "{out}");
    assert_eq!(
        out["elicitations"].as_array().map(Vec::len),
        Some(1),
        "{out}"
    );
    // Four answered tasks charged one step each; the declined one nothing.
    w.admin.charged(subject, 10, 4).await;
}
