//! MCP against the real thing: the official MCP Python SDK as the client of interlingua's `mcp`
//! face, in both of its lines (2.x and 1.x), each in its own virtualenv (`tests/common/peers.rs`):
//!
//! - mcp 2.3.0 `Client` (`tests/peers/mcp_client2.py`), in `legacy` mode and in its default
//!   `auto` mode (which asks `server/discover` at 2026-07-28 first and falls back to
//!   `initialize`);
//! - mcp 1.30.0 `ClientSession` (`tests/peers/mcp_client1.py`), plain and with its experimental
//!   Tasks (`call_tool_as_task`, `poll_task`, `get_task_result`, `list_tasks`, `cancel_task`).
//!
//! The agents behind interlingua are real too: the `masumi` 1.2.0 package as a MIP-003 agent (with
//! the payment node stand-in it waits on) and the `a2a-sdk` 1.3.0 agent, besides interlingua's
//! sample MIP-003 and Nevermined agents for the timing-sensitive cases, each asking for input in a
//! named field or in words. Every route is paid: the ledger shows one hold, a capture per
//! completed step and the release, whatever the client.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::money::{paid_config, paid_route, Admin};
use common::peers::{masumi_agent, mcp1_python, mcp2_python, peers_python, run_json, Peer};
use common::secrets::token;
use common::{sample_agent, sample_agent_asking_in_words, Proxy, DEADLINE};
use serde_json::{json, Value};

/// How long a job takes on the sample agent and on the SDK's A2A agent.
const WORK: Duration = Duration::from_millis(1200);
/// Long enough that a client cancels the task while it runs.
const SLOW_WORK: Duration = Duration::from_secs(6);
/// The DID of the sample Nevermined agent.
const DID: &str = "did:nv:5392e8cdc5addec2b7384072fda166d42a5d4ab96ae6d311f516b6b324f24cec";

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
/// | `/a2a` | `a2a_agent` | a2a | the `a2a-sdk` 1.3.0 agent (asks for input in words) |
/// | `/mip_words` | `upper_words` | mip003 | the sample agent asking for input in words |
/// | `/nvm` | `nvm_upper` | nevermined | the sample Nevermined agent, tasks of [`WORK`] |
/// | `/nvm_words` | `nvm_words` | nevermined | the same, asking for input in words |
///
/// The sample agents ask (text `mode:input`) for a field `more`, or in words (no field named:
/// the MIP-003 agent's status carries a question and no input schema, the Nevermined agent's
/// waiting step its question and no `input_schema`).
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
    let mip_words = sample_agent_asking_in_words(samples::mip003::serve, WORK).await;
    let nvm = sample_agent(samples::nevermined::serve, WORK).await;
    let nvm_words = sample_agent_asking_in_words(samples::nevermined::serve, WORK).await;
    let mut rest = format!(
        "[[upstreams]]\nname = \"mip\"\naddress = \"{mip}\"\n\n\
         [[upstreams]]\nname = \"slow\"\naddress = \"{slow}\"\n\n\
         [[upstreams]]\nname = \"mip_words\"\naddress = \"{mip_words}\"\n\n\
         [[upstreams]]\nname = \"nvm\"\naddress = \"{nvm}\"\n\n\
         [[upstreams]]\nname = \"nvm_words\"\naddress = \"{nvm_words}\"\n\n\
         [[upstreams]]\nname = \"masumi\"\naddress = \"127.0.0.1:{}\"\nread_timeout = \"10s\"\n\n\
         [[upstreams]]\nname = \"a2a\"\naddress = \"127.0.0.1:{}\"\nread_timeout = \"10s\"\n",
        peers[1].port, peers[2].port
    );
    for (name, prefix, upstream, back) in [
        ("upper", "/mip", "mip", "mip003"),
        ("slow_upper", "/slow", "slow", "mip003"),
        ("upper_words", "/mip_words", "mip_words", "mip003"),
        ("nvm_upper", "/nvm", "nvm", "nevermined"),
        ("nvm_words", "/nvm_words", "nvm_words", "nevermined"),
        ("masumi_agent", "/masumi", "masumi", "mip003"),
        ("a2a_agent", "/a2a", "a2a", "a2a"),
    ] {
        let mut settings = "sync_timeout = \"20s\"".to_string();
        if back == "nevermined" {
            settings.push_str(&format!("\nvars.nevermined = {{ agent_did = \"{DID}\" }}"));
        }
        rest.push_str(&paid_route(name, prefix, upstream, "mcp", back, &settings));
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

/// An agent that asks for input, as a route of [`world`] reaches it: what the client answers
/// when asked, the one field the form it gets asks for, and the tool's result once answered.
struct Asking {
    prefix: &'static str,
    tool: &'static str,
    /// The elicitation's content, as the client accepts it.
    answer: &'static str,
    /// The field the form asks for: the agent's own (`more`), or, asked in words, `text`.
    asked: &'static str,
    /// The agent's question, when it asks in words (a form's words are interlingua's otherwise).
    question: Option<&'static str>,
    expected: &'static str,
    /// What one task costs once answered: a Nevermined agent's four steps, else one.
    cost: i64,
}

/// The sample MIP-003 and Nevermined agents, asking in a field and in words, and the a2a-sdk
/// agent, which asks in words (A2A has no input schema: an A2A agent cannot name a field).
const ASKING: [Asking; 5] = [
    Asking {
        prefix: "/mip",
        tool: "upper",
        answer: r#"{"more":"please"}"#,
        asked: "more",
        question: None,
        expected: "HELLO MODE:INPUT please",
        cost: 1,
    },
    Asking {
        prefix: "/mip_words",
        tool: "upper_words",
        answer: r#"{"text":"more text"}"#,
        asked: "text",
        question: Some("What should be added?"),
        expected: "HELLO MODE:INPUT more text",
        cost: 1,
    },
    Asking {
        prefix: "/nvm",
        tool: "nvm_upper",
        answer: r#"{"more":"please"}"#,
        asked: "more",
        question: None,
        expected: "HELLO MODE:INPUT please",
        cost: 4,
    },
    Asking {
        prefix: "/nvm_words",
        tool: "nvm_words",
        answer: r#"{"text":"more text"}"#,
        asked: "text",
        question: Some("What should be added?"),
        expected: "HELLO MODE:INPUT more text",
        cost: 4,
    },
    Asking {
        prefix: "/a2a",
        tool: "a2a_agent",
        answer: r#"{"text":"more text"}"#,
        asked: "text",
        question: Some("Please provide more"),
        expected: "HELLO MODE:INPUT more text",
        cost: 1,
    },
];

/// The clients that elicit: mcp 2.3.0 in the legacy era (`elicitation/create` on the call's
/// stream) and in 2026-07-28 (`input_required`, answered by calling again), mcp 1.30.0 (legacy).
const ELICITING: [(bool, &str); 3] = [(false, "legacy"), (false, "2026-07-28"), (true, "legacy")];

fn subject_of(what: &str, agent: &Asking) -> String {
    format!("{what}{}", agent.prefix.replace('/', "-"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_clients_answer_agents_asking_in_words_and_in_fields_and_the_answer_reaches_them() {
    let w = world().await;
    for agent in &ASKING {
        w.admin.grant(&subject_of("asked", agent), 20).await;
    }
    for (v1, mode) in ELICITING {
        let calls = ASKING.iter().map(|agent| {
            let w = &w;
            async move {
                let subject = subject_of("asked", agent);
                let args = [
                    "--mode",
                    mode,
                    "--elicit",
                    agent.answer,
                    "--call",
                    agent.tool,
                    "--args",
                    r#"{"text":"hello mode:input"}"#,
                ];
                w.sdk(v1, agent.prefix, Some(&subject), &args).await
            }
        });
        let outs = futures_util::future::join_all(calls).await;
        for (agent, out) in ASKING.iter().zip(outs) {
            let case = format!(
                "{} {mode} {}",
                if v1 { "1.30.0" } else { "2.3.0" },
                agent.tool
            );
            assert_eq!(out["error"], Value::Null, "{case}: {out}");
            // The answer reached the agent: in its field, or, asked in words, as its text
            // (Nevermined's input_query, the A2A message's text, MIP-003's input_data.text).
            assert_eq!(out["result"]["isError"], false, "{case}: {out}");
            assert_eq!(text(&out), agent.expected, "{case}: {out}");
            let seen = out["elicitations"].as_array().expect("elicitations");
            assert_eq!(seen.len(), 1, "{case}: {out}");
            let schema = &seen[0]["requestedSchema"];
            assert_eq!(schema["required"], json!([agent.asked]), "{case}: {out}");
            assert_eq!(
                schema["properties"][agent.asked]["type"], "string",
                "{case}: {out}"
            );
            if let Some(question) = agent.question {
                assert_eq!(seen[0]["message"], question, "{case}: {out}");
            }
        }
    }
    // Three answered tasks per agent, each charged its steps.
    for agent in &ASKING {
        let cost = 3 * agent.cost;
        w.admin.charged(&subject_of("asked", agent), 20, cost).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_clients_that_decline_or_dismiss_the_question_cancel_the_task_in_both_eras() {
    let w = world().await;
    let [mip, mip_words, nvm, nvm_words, a2a] = &ASKING;
    // (1.30.0?, era, how the client answers, the agent asking)
    let cases: [(bool, &str, &str, &Asking); 6] = [
        (false, "2026-07-28", "--decline", mip),
        (false, "2026-07-28", "--decline", a2a),
        (false, "2026-07-28", "--dismiss", nvm_words),
        (false, "2026-07-28", "--dismiss", mip_words),
        (false, "legacy", "--dismiss", a2a),
        (true, "legacy", "--decline", nvm),
    ];
    for i in 0..cases.len() {
        w.admin.grant(&format!("refused-{i}"), 5).await;
    }
    let calls = cases.iter().enumerate().map(|(i, (v1, mode, how, agent))| {
        let w = &w;
        async move {
            let subject = format!("refused-{i}");
            let args = [
                "--mode",
                mode,
                how,
                "--call",
                agent.tool,
                "--args",
                r#"{"text":"hello mode:input"}"#,
            ];
            w.sdk(*v1, agent.prefix, Some(&subject), &args).await
        }
    });
    let outs = futures_util::future::join_all(calls).await;
    for (i, ((v1, mode, how, agent), out)) in cases.iter().zip(outs).enumerate() {
        let case = format!(
            "{i}: {} {mode} {how} {}",
            if *v1 { "1.30.0" } else { "2.3.0" },
            agent.tool
        );
        assert_eq!(out["error"], Value::Null, "{case}: {out}");
        assert_eq!(
            out["elicitations"].as_array().map(Vec::len),
            Some(1),
            "{case}: {out}"
        );
        // The task was cancelled, and the call says so, as a tool error.
        assert_eq!(out["result"]["isError"], true, "{case}: {out}");
        assert_eq!(text(&out), "The task was cancelled.", "{case}: {out}");
        // Its hold released; what the agent finished before it asked is charged (the Nevermined
        // agent's first two steps), nothing after.
        let captured = if agent.cost == 4 { 2 } else { 0 };
        w.admin.charged(&format!("refused-{i}"), 5, captured).await;
    }
}
