//! A2A against the real thing: the official Python package `a2a-sdk` 1.3.0 (pinned in
//! `tests/peers/requirements.txt`) on either side of interlingua, through the real proxy.
//!
//! - The SDK's client (`tests/peers/a2a_client.py`: `A2ACardResolver` + `ClientFactory`, in its
//!   own 1.0 transport and in its 0.3 compat transport) reads the card of interlingua's `a2a` face
//!   and drives a task over interlingua's sample MIP-003 agent: polled to completion, blocking,
//!   asking for input, failing, streamed, cancelled, and unknown; credits are charged once per
//!   completed task.
//! - The SDK's server (`tests/peers/a2a_agent.py`: `DefaultRequestHandler` with 1.0 and 0.3
//!   JSON-RPC on one endpoint) is reached as a Nevermined endpoint and as a MIP-003 service, with
//!   interlingua speaking A2A 1.0 or 0.3 to it.
//! - Both at once: the SDK's client reaches the SDK's server through an `a2a` to `a2a` route.
//!
//! The client prints one JSON object: every task state it saw, in order, consecutive repeats
//! collapsed; the final state; the artifact text; the status messages; and each stream event.

mod common;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use common::money::{paid_config, paid_route, Admin};
use common::peers::{peers_python, run_script, Peer};
use common::secrets::token;
use common::wait::states;
use common::{client, sample_agent, status_and_json, Proxy, DEADLINE};
use serde_json::{json, Value};

/// How long a task takes on either agent in most tests: long enough that every state lasts
/// several polls of the client (every 100 ms) and of interlingua (every 50–200 ms).
const WORK: Duration = Duration::from_millis(1200);
/// How long a task takes where a test cancels it while it runs: the SDK's agent works for the
/// second half of it, and the client cancels as soon as it sees that.
const SLOW_WORK: Duration = Duration::from_secs(4);
const DID: &str = "did:nv:5392e8cdc5addec2b7384072fda166d42a5d4ab96ae6d311f516b6b324f24cec";

const SUBMITTED: &str = "TASK_STATE_SUBMITTED";
const WORKING: &str = "TASK_STATE_WORKING";
const INPUT_REQUIRED: &str = "TASK_STATE_INPUT_REQUIRED";
const COMPLETED: &str = "TASK_STATE_COMPLETED";
const FAILED: &str = "TASK_STATE_FAILED";
const CANCELED: &str = "TASK_STATE_CANCELED";

/// The SDK's client in every binding and version: JSON-RPC 1.0, JSON-RPC 0.3, HTTP+JSON 1.0.
const CLIENTS: [&str; 3] = ["1.0", "0.3", "rest"];

/// The real peers and a proxy with these routes, each needing a token of plan `gold`, a task
/// holding 1 credit and costing 1:
///
/// | prefix | front | back, upstream |
/// |---|---|---|
/// | `/mip` | a2a | mip003, interlingua's sample agent |
/// | `/sdk` | a2a | a2a 1.0, the SDK's agent |
/// | `/sdk03` | a2a | a2a 0.3, the SDK's agent |
/// | `/nv` | nevermined | a2a 1.0, the SDK's agent |
/// | `/nv03` | nevermined | a2a 0.3, the SDK's agent |
/// | `/job` | mip003 | a2a (the card's choice: JSON-RPC 1.0), the SDK's agent |
/// | `/jobcard` | mip003 | a2a, its card read from `vars.a2a.card_url` (another host's URL: its path on the SDK's agent) |
/// | `/rest`, `/nvrest`, `/jobrest` | a2a, nevermined, mip003 | a2a over HTTP+JSON: the SDK's agent whose card offers only that |
///
/// Both agents are served the usual way: card at the root, JSON-RPC at `/a2a/jsonrpc`, HTTP+JSON
/// under `/a2a/rest`; interlingua finds them through the card.
/// | `/job` | mip003 | a2a 1.0, the SDK's agent |
struct World {
    proxy: Proxy,
    admin: Admin,
    http: reqwest::Client,
    python: PathBuf,
    agent: Peer,
    /// The SDK's agent whose card offers HTTP+JSON only (and serves nothing else).
    rest_agent: Peer,
}

/// The SDK's agent served the usual way (card at the root, JSON-RPC at `/a2a/jsonrpc`, HTTP+JSON
/// under `/a2a/rest`), with these extra arguments.
async fn sdk_agent(python: &std::path::Path, work: Duration, extra: &[&str]) -> Peer {
    let seconds = format!("{}", work.as_secs_f64());
    let p = python.to_path_buf();
    let mut args: Vec<String> = ["--work", &seconds].iter().map(|s| s.to_string()).collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    if !extra.contains(&"--port") {
        args.extend(["--port".to_string(), "0".to_string()]);
    }
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Peer::start(&p, "a2a_agent.py", &args, &[])
    })
    .await
    .unwrap()
}

/// Starts the world with agents whose tasks take `work`.
async fn world(work: Duration) -> World {
    let python = tokio::task::spawn_blocking(peers_python).await.unwrap();
    let agent = sdk_agent(&python, work, &[]).await;
    let rest_agent = sdk_agent(&python, work, &["--interfaces", "HTTP+JSON@1.0"]).await;
    let mip = sample_agent(samples::mip003::serve, work).await;
    let mut rest = format!(
        r#"
[[upstreams]]
name = "mip"
address = "{mip}"
read_timeout = "5s"

[[upstreams]]
name = "sdk"
address = "127.0.0.1:{}"
read_timeout = "5s"

[[upstreams]]
name = "sdkrest"
address = "127.0.0.1:{}"
read_timeout = "5s"
"#,
        agent.port, rest_agent.port
    );
    let routes = [
        ("mip", "mip", "a2a", "mip003", ""),
        ("sdk", "sdk", "a2a", "a2a", ""),
        (
            "sdk03",
            "sdk",
            "a2a",
            "a2a",
            "vars.a2a = { version = \"0.3\" }",
        ),
        ("nv", "sdk", "nevermined", "a2a", ""),
        (
            "nv03",
            "sdk",
            "nevermined",
            "a2a",
            "vars.a2a = { version = \"0.3\" }",
        ),
        ("job", "sdk", "mip003", "a2a", ""),
        ("rest", "sdkrest", "a2a", "a2a", ""),
        ("nvrest", "sdkrest", "nevermined", "a2a", ""),
        ("jobrest", "sdkrest", "mip003", "a2a", ""),
        // The card's URL names another host: only its path is read, on the route's upstream.
        (
            "jobcard",
            "sdk",
            "mip003",
            "a2a",
            "vars.a2a = { card_url = \"http://elsewhere.invalid:1/.well-known/agent.json\" }",
        ),
    ];
    for (name, upstream, front, back, extra) in routes {
        rest.push_str(&paid_route(
            name,
            &format!("/{name}"),
            upstream,
            front,
            back,
            &format!("sync_timeout = \"10s\"\n{extra}"),
        ));
    }
    let proxy = Proxy::start(&paid_config(&rest));
    World {
        admin: Admin::new(&proxy),
        proxy,
        http: client(),
        python,
        agent,
        rest_agent,
    }
}

/// What one run of the SDK's client reported.
struct Outcome {
    exited_ok: bool,
    out: Value,
    stderr: String,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "exit ok: {}\nstdout: {}\nstderr (last lines): {}",
            self.exited_ok,
            self.out,
            self.stderr
                .lines()
                .rev()
                .take(15)
                .collect::<Vec<_>>()
                .join("\n  ")
        )
    }
}

impl Outcome {
    fn states(&self) -> Vec<&str> {
        self.out["states"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }

    /// The stream events as `kind` or `kind state`, each with its text if it has one.
    fn events(&self) -> Vec<String> {
        self.out["events"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| {
                        let mut s = e["kind"].as_str().unwrap_or("?").to_string();
                        for key in ["state", "text"] {
                            if let Some(v) = e[key].as_str() {
                                s.push(' ');
                                s.push_str(v);
                            }
                        }
                        s
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Asserts the client ran to the end without an error and saw `states`, ending in the last.
    fn assert_ran(&self, states: &[&str]) {
        assert!(self.exited_ok, "{self}");
        assert_eq!(self.out["error"], Value::Null, "{self}");
        assert_eq!(self.states(), states, "{self}");
        assert_eq!(self.out["final_state"], states[states.len() - 1], "{self}");
    }
}

/// The subject a run of the SDK's client acts as: one per route, scenario and version, so that
/// each is charged on its own.
fn subject(prefix: &str, scenario: &str, version: &str) -> String {
    format!("{}-{scenario}-{version}", prefix.trim_start_matches('/'))
}

impl World {
    /// Runs the SDK's client: scenario `scenario` in protocol `version` against the `a2a` face at
    /// `prefix`, as `subject` (no token if `None`).
    async fn sdk_client(
        &self,
        prefix: &str,
        scenario: &str,
        version: &str,
        subject: Option<&str>,
    ) -> Outcome {
        // "rest": A2A 1.0 over the HTTP+JSON binding.
        let (version, binding) = match version {
            "rest" => ("1.0", "HTTP+JSON"),
            v => (v, "JSONRPC"),
        };
        let mut args: Vec<String> = [
            "--url",
            &self.proxy.url(prefix),
            "--scenario",
            scenario,
            "--version",
            version,
            "--binding",
            binding,
            "--timeout",
            "15",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(sub) = subject {
            args.extend(["--token".to_string(), token(sub)]);
        }
        let python = self.python.clone();
        let ran = tokio::task::spawn_blocking(move || {
            run_script(&python, "a2a_client.py", &args, DEADLINE)
        })
        .await
        .unwrap();
        let out = serde_json::from_str(ran.stdout.trim())
            .unwrap_or_else(|_| Value::String(ran.stdout.clone()));
        Outcome {
            exited_ok: ran.status.success(),
            out,
            stderr: ran.stderr,
        }
    }

    /// Runs every `(scenario, version)`, four at a time, each as its own [`subject`] granted 5
    /// credits; the outcomes in the same order.
    async fn sdk_clients(&self, prefix: &str, runs: &[(&str, &str)]) -> Vec<Outcome> {
        let subjects: Vec<String> = runs.iter().map(|(s, v)| subject(prefix, s, v)).collect();
        for sub in &subjects {
            self.admin.grant(sub, 5).await;
        }
        // At most four at once: each client is a Python process importing the SDK, and on a
        // small machine a dozen at a time starve each other past the deadline.
        use futures_util::StreamExt;
        futures_util::stream::iter(
            runs.iter()
                .zip(&subjects)
                .map(|((scenario, version), sub)| {
                    self.sdk_client(prefix, scenario, version, Some(sub))
                }),
        )
        .buffered(4)
        .collect()
        .await
    }

    /// A request as `subject`; the status and the JSON body.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        subject: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, self.proxy.url(path))
            .bearer_auth(token(subject));
        if let Some(b) = body {
            req = req.json(&b);
        }
        status_and_json(req.send().await.unwrap()).await
    }

    /// GETs `path` until `field` of its body is one of `until`, within the deadline; every value
    /// of `field` seen on the way (consecutive repeats collapsed), and the last body.
    async fn poll(
        &self,
        path: &str,
        subject: &str,
        field: impl Fn(&Value) -> String,
        until: &[&str],
    ) -> (Vec<String>, Value) {
        states(path, until, || async {
            let (status, body) = self.call(reqwest::Method::GET, path, subject, None).await;
            assert_eq!(status, 200, "{path}: {body}");
            (field(&body), body)
        })
        .await
    }
}

// ------------------------------------------------ the SDK's client, interlingua's a2a face

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_client_polls_and_blocks_on_a_mip003_task_to_completion_and_pays_one_credit_each() {
    let w = world(WORK).await;
    let runs: Vec<(&str, &str)> = CLIENTS
        .iter()
        .flat_map(|v| [("complete", *v), ("blocking", *v)])
        .collect();
    let outcomes = w.sdk_clients("/mip", &runs).await;
    for ((scenario, version), o) in runs.iter().zip(&outcomes) {
        // The card sends the client back to interlingua, in the version it asked for.
        let url = w.proxy.url("/mip/");
        assert_eq!(o.out["card_interfaces"][0]["url"], url.as_str(), "{o}");
        let transport = match *version {
            "1.0" => "JsonRpcTransport",
            "0.3" => "CompatJsonRpcTransport",
            _ => "RestTransport",
        };
        assert_eq!(o.out["transport"], transport, "{o}");
        if *scenario == "complete" {
            o.assert_ran(&[SUBMITTED, WORKING, COMPLETED]);
        } else {
            // A blocking send answers once, with the settled task.
            o.assert_ran(&[COMPLETED]);
        }
        assert_eq!(o.out["artifact_text"], "HELLO WORLD", "{o}");
        assert_eq!(o.out["task_id"], o.out["context_id"], "{o}");
        w.admin
            .charged(&subject("/mip", scenario, version), 5, 1)
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_client_answers_the_input_request_of_a_mip003_agent_and_pays_one_credit() {
    let w = world(WORK).await;
    let runs: Vec<(&str, &str)> = CLIENTS.iter().map(|v| ("input", *v)).collect();
    let outcomes = w.sdk_clients("/mip", &runs).await;
    for ((scenario, version), o) in runs.iter().zip(&outcomes) {
        o.assert_ran(&[SUBMITTED, WORKING, INPUT_REQUIRED, WORKING, COMPLETED]);
        // The sample MIP-003 agent: the text upper-cased, then the follow-up's `more`.
        assert_eq!(
            o.out["artifact_text"], "HELLO MODE:INPUT more please",
            "{o}"
        );
        assert_eq!(
            o.out["status_messages"],
            json!(["The agent needs more input: More details"]),
            "{o}"
        );
        w.admin
            .charged(&subject("/mip", scenario, version), 5, 1)
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_client_sees_a_failed_mip003_task_and_pays_nothing() {
    let w = world(WORK).await;
    let runs: Vec<(&str, &str)> = CLIENTS.iter().map(|v| ("fail", *v)).collect();
    let outcomes = w.sdk_clients("/mip", &runs).await;
    for ((scenario, version), o) in runs.iter().zip(&outcomes) {
        o.assert_ran(&[SUBMITTED, WORKING, FAILED]);
        assert_eq!(o.out["artifact_text"], Value::Null, "{o}");
        w.admin
            .charged(&subject("/mip", scenario, version), 5, 0)
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_client_streams_a_mip003_task_and_its_input_round_in_both_versions() {
    let w = world(WORK).await;
    let runs: Vec<(&str, &str)> = CLIENTS
        .iter()
        .flat_map(|v| [("stream", *v), ("stream_input", *v)])
        .collect();
    let outcomes = w.sdk_clients("/mip", &runs).await;
    for ((scenario, version), o) in runs.iter().zip(&outcomes) {
        let events = o.events();
        let n = events.len();
        assert_eq!(
            events.first().map(String::as_str),
            Some("task TASK_STATE_SUBMITTED"),
            "{o}"
        );
        let result = if *scenario == "stream" {
            o.assert_ran(&[SUBMITTED, WORKING, COMPLETED]);
            "HELLO WORLD"
        } else {
            o.assert_ran(&[SUBMITTED, WORKING, INPUT_REQUIRED, WORKING, COMPLETED]);
            // The first stream closes on the question; the second starts with the work after it.
            let ask = events
                .iter()
                .position(|e| e == "follow-up")
                .expect("a follow-up");
            assert_eq!(
                events[ask - 1],
                "statusUpdate TASK_STATE_INPUT_REQUIRED",
                "{o}"
            );
            assert_eq!(events[ask + 1], "statusUpdate TASK_STATE_WORKING", "{o}");
            "HELLO MODE:INPUT more please"
        };
        // One artifact, whole, then the terminal status, and the stream ends.
        assert_eq!(
            events[n - 2..],
            [
                format!("artifactUpdate {result}"),
                "statusUpdate TASK_STATE_COMPLETED".to_string()
            ],
            "{o}"
        );
        assert_eq!(
            events
                .iter()
                .filter(|e| e.starts_with("artifactUpdate"))
                .count(),
            1,
            "{o}"
        );
        assert_eq!(o.out["artifact_text"], result, "{o}");
        w.admin
            .charged(&subject("/mip", scenario, version), 5, 1)
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_client_cancels_a_running_mip003_task_and_pays_nothing() {
    let w = world(SLOW_WORK).await;
    let runs: Vec<(&str, &str)> = CLIENTS.iter().map(|v| ("cancel", *v)).collect();
    let outcomes = w.sdk_clients("/mip", &runs).await;
    for ((scenario, version), o) in runs.iter().zip(&outcomes) {
        o.assert_ran(&[SUBMITTED, WORKING, CANCELED]);
        w.admin
            .charged(&subject("/mip", scenario, version), 5, 0)
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_client_is_refused_without_a_token_or_credits_and_an_unknown_task_is_not_found() {
    let w = world(WORK).await;
    let lost = subject("/mip", "unknown_task", "1.0");
    w.admin.grant(&lost, 5).await;
    let (unknown, unknown_rest, anonymous, broke) = tokio::join!(
        w.sdk_client("/mip", "unknown_task", "1.0", Some(&lost)),
        w.sdk_client("/mip", "unknown_task", "rest", Some(&lost)),
        w.sdk_client("/mip", "complete", "1.0", None),
        w.sdk_client("/mip", "complete", "1.0", Some("nobody")),
    );
    for o in [&unknown, &unknown_rest] {
        assert!(!o.exited_ok, "{o}");
        assert_eq!(
            o.out["error"], "TaskNotFoundError: task `no-such-task` not found",
            "{o}"
        );
    }
    // Over HTTP+JSON, the error is REST's: its status, and the body a2a-sdk's REST handler writes.
    let (status, body) = w
        .call(reqwest::Method::GET, "/mip/tasks/no-such-task", &lost, None)
        .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(
        body,
        json!({"error": {
            "code": 404,
            "status": "NOT_FOUND",
            "message": "task `no-such-task` not found",
            "details": [{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "TASK_NOT_FOUND",
                "domain": "a2a-protocol.org",
                "metadata": {}
            }]
        }})
    );
    // ListTasks over HTTP+JSON: the caller's tasks on this route (none).
    let (status, body) = w
        .call(reqwest::Method::GET, "/mip/tasks?pageSize=10", &lost, None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"tasks": [], "nextPageToken": "", "pageSize": 10, "totalSize": 0})
    );
    // The card is public (it names the bearer scheme); the JSON-RPC call is refused with 401
    // before JSON-RPC, which the SDK reports as an HTTP error.
    let rpc_url = w.proxy.url("/mip/");
    assert_eq!(
        anonymous.out["card_interfaces"][0]["url"],
        rpc_url.as_str(),
        "{anonymous}"
    );
    let refused = |o: &Outcome, status: &str| {
        assert!(!o.exited_ok, "{o}");
        let error = o.out["error"].as_str().unwrap_or_default();
        let expected = format!("A2AClientError: HTTP Error {status}: Client error '{status} ");
        assert!(error.starts_with(&expected), "{o}");
        assert!(error.contains(&format!("for url '{rpc_url}'")), "{o}");
        assert_eq!(o.out["task_id"], Value::Null, "{o}");
    };
    refused(&anonymous, "401");
    // No credits: the hold cannot be taken, 402, and no task exists.
    refused(&broke, "402");
    w.admin.charged(&lost, 5, 0).await;
}

// ------------------------------------------------ the SDK's agent behind a Nevermined face

impl World {
    /// Creates a Nevermined task on `prefix` with `query`; its id.
    async fn nv_create(&self, prefix: &str, subject: &str, query: &str) -> String {
        let (status, created) = self
            .call(
                reqwest::Method::POST,
                &format!("{prefix}/api/v1/agents/{DID}/tasks"),
                subject,
                Some(json!({"input_query": query, "name": "sdk"})),
            )
            .await;
        assert_eq!(status, 201, "{created}");
        assert_eq!(created["task"]["task_status"], "Pending", "{created}");
        assert_eq!(created["task"]["input_query"], query, "{created}");
        created["task"]["task_id"].as_str().unwrap().to_string()
    }

    /// Polls a Nevermined task until its status is one of `until`; every status seen, the body.
    async fn nv_poll(&self, path: &str, subject: &str, until: &[&str]) -> (Vec<String>, Value) {
        self.poll(
            path,
            subject,
            |b| b["task"]["task_status"].as_str().unwrap_or("?").to_string(),
            until,
        )
        .await
    }

    /// A task that completes, one that asks for input and completes after it, and one that
    /// fails, on the Nevermined route at `prefix`; one credit per completed task.
    async fn nevermined_lifecycle(&self, prefix: &str) {
        let sub = format!("nv-user{}", prefix.replace('/', "-"));
        self.admin.grant(&sub, 10).await;
        let tasks = format!("{prefix}/api/v1/agents/{DID}/tasks");

        let ok = self.nv_create(prefix, &sub, "hello world").await;
        let (seen, done) = self
            .nv_poll(&format!("{tasks}/{ok}"), &sub, &["Completed", "Failed"])
            .await;
        assert_eq!(done["task"]["task_status"], "Completed", "{prefix}: {done}");
        assert_eq!(done["task"]["output"], "HELLO WORLD", "{prefix}: {done}");
        assert_eq!(
            seen,
            ["Pending", "In_Progress", "Completed"],
            "{prefix}: {done}"
        );
        assert_eq!(done["task"]["cost"], 1, "{prefix}: {done}");
        let steps = done["steps"].as_array().unwrap();
        assert_eq!(steps.last().unwrap()["is_last"], true, "{done}");
        assert_eq!(steps.last().unwrap()["output"], "HELLO WORLD", "{done}");

        // Input: the Not_Ready step takes the answer.
        let asks = self.nv_create(prefix, &sub, "hello mode:input").await;
        let path = format!("{tasks}/{asks}");
        let (_, waiting) = self
            .nv_poll(&path, &sub, &["Not_Ready", "Completed", "Failed"])
            .await;
        assert_eq!(
            waiting["task"]["task_status"], "Not_Ready",
            "{prefix}: {waiting}"
        );
        let step = waiting["steps"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(step["step_status"], "Not_Ready", "{prefix}: {waiting}");
        assert_eq!(step["is_waiting"], true, "{prefix}: {waiting}");
        let step_id = step["step_id"].as_str().unwrap();
        let (status, updated) = self
            .call(
                reqwest::Method::PUT,
                &format!("{path}/step/{step_id}"),
                &sub,
                Some(json!({"step_status": "Pending", "input_query": "more please"})),
            )
            .await;
        assert_eq!(status, 201, "{prefix}: {updated}");
        assert_eq!(updated["step_id"], step_id, "{prefix}: {updated}");
        let (_, done) = self.nv_poll(&path, &sub, &["Completed", "Failed"]).await;
        assert_eq!(
            (
                done["task"]["task_status"].as_str(),
                done["task"]["output"].as_str()
            ),
            (Some("Completed"), Some("HELLO MODE:INPUT more please")),
            "{prefix}: {done}"
        );
        assert_eq!(done["task"]["cost"], 1, "{prefix}: {done}");

        // Failure: a failed task; its output is what the agent said.
        let bad = self.nv_create(prefix, &sub, "hello mode:fail").await;
        let (_, failed) = self
            .nv_poll(&format!("{tasks}/{bad}"), &sub, &["Completed", "Failed"])
            .await;
        assert_eq!(
            failed["task"]["task_status"], "Failed",
            "{prefix}: {failed}"
        );
        assert_eq!(
            failed["task"]["output"], "the agent failed on purpose",
            "{prefix}: {failed}"
        );
        assert_eq!(failed["task"]["cost"], 0, "{prefix}: {failed}");
        let last = failed["steps"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["step_status"], "Failed", "{prefix}: {failed}");

        self.admin.charged(&sub, 10, 2).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_agent_as_a_nevermined_endpoint_speaking_a2a_1_0_to_it() {
    world(WORK).await.nevermined_lifecycle("/nv").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_agent_as_a_nevermined_endpoint_speaking_a2a_0_3_to_it() {
    world(WORK).await.nevermined_lifecycle("/nv03").await;
}

// ------------------------------------------------ the SDK's agent behind a MIP-003 face

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_agent_as_a_mip003_service_asks_for_input_completes_and_fails() {
    mip003_lifecycle(&world(WORK).await, "/job").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_agent_offering_only_http_json_as_a_mip003_service() {
    mip003_lifecycle(&world(WORK).await, "/jobrest").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_agent_offering_only_http_json_as_a_nevermined_endpoint() {
    world(WORK).await.nevermined_lifecycle("/nvrest").await;
}

/// A task that asks for input and completes after it, and one that fails, on the MIP-003 route at
/// `prefix` over the SDK's agent; one credit in all.
async fn mip003_lifecycle(w: &World, prefix: &'static str) {
    let sub: &'static str = if prefix == "/job" {
        "mip-user"
    } else {
        "mip-user-rest"
    };
    w.admin.grant(sub, 10).await;
    let start = |text: &'static str| {
        let w = &w;
        async move {
            let (status, v) = w
                .call(
                    reqwest::Method::POST,
                    &format!("{prefix}/start_job"),
                    sub,
                    Some(json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": text}})),
                )
                .await;
            assert_eq!(status, 200, "{v}");
            v["job_id"].as_str().unwrap().to_string()
        }
    };
    let status_of = |b: &Value| b["status"].as_str().unwrap_or("?").to_string();

    let job = start("hello mode:input").await;
    let path = format!("{prefix}/status?job_id={job}");
    let (seen, waiting) = w
        .poll(
            &path,
            sub,
            status_of,
            &["awaiting_input", "completed", "failed"],
        )
        .await;
    // MIP-003 has no pending: a submitted A2A task is running.
    assert_eq!(seen, ["running", "awaiting_input"], "{waiting}");
    // The agent's question, and what to answer: the text of an A2A message.
    assert_eq!(waiting["message"], "Please provide more", "{waiting}");
    assert_eq!(
        waiting["input_schema"]["input_data"][0]["id"], "text",
        "{waiting}"
    );
    let (status, r) = w
        .call(
            reqwest::Method::POST,
            &format!("{prefix}/provide_input"),
            sub,
            Some(json!({"job_id": job, "status_id": waiting["id"], "input_data": {"text": "more please"}})),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    let (_, done) = w
        .poll(&path, sub, status_of, &["completed", "failed"])
        .await;
    assert_eq!(
        (done["status"].as_str(), done["result"].as_str()),
        (Some("completed"), Some("HELLO MODE:INPUT more please")),
        "{done}"
    );

    let bad = start("hello mode:fail").await;
    let (_, failed) = w
        .poll(
            &format!("{prefix}/status?job_id={bad}"),
            sub,
            status_of,
            &["completed", "failed"],
        )
        .await;
    assert_eq!(failed["status"], "failed", "{failed}");
    w.admin.charged(sub, 10, 1).await;
}

// ------------------------------------------------ the SDK on both sides

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_client_reaches_the_sdk_agent_through_interlingua_in_every_version_pairing() {
    let w = world(WORK).await;
    for prefix in ["/sdk", "/sdk03", "/rest"] {
        let runs: Vec<(&str, &str)> = CLIENTS
            .iter()
            .flat_map(|v| {
                [
                    ("complete", *v),
                    ("input", *v),
                    ("fail", *v),
                    ("stream_input", *v),
                ]
            })
            .collect();
        let outcomes = w.sdk_clients(prefix, &runs).await;
        for ((scenario, version), o) in runs.iter().zip(&outcomes) {
            let ctx = format!("{prefix} {scenario} {version}");
            let (captured, messages) = match *scenario {
                "complete" => {
                    o.assert_ran(&[SUBMITTED, WORKING, COMPLETED]);
                    assert_eq!(o.out["artifact_text"], "HELLO WORLD", "{ctx}: {o}");
                    (1, json!([]))
                }
                "fail" => {
                    o.assert_ran(&[SUBMITTED, WORKING, FAILED]);
                    // Its words are its status message, not a result.
                    assert_eq!(o.out["artifact_text"], Value::Null, "{ctx}: {o}");
                    (0, json!(["the agent failed on purpose"]))
                }
                _ => {
                    o.assert_ran(&[SUBMITTED, WORKING, INPUT_REQUIRED, WORKING, COMPLETED]);
                    assert_eq!(
                        o.out["artifact_text"], "HELLO MODE:INPUT more please",
                        "{ctx}: {o}"
                    );
                    (1, json!(["Please provide more"]))
                }
            };
            assert_eq!(o.out["status_messages"], messages, "{ctx}: {o}");
            w.admin
                .charged(&subject(prefix, scenario, version), 5, captured)
                .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_client_cancels_a_running_task_on_the_sdk_agent_through_interlingua() {
    let w = world(SLOW_WORK).await;
    let runs: Vec<(&str, &str)> = CLIENTS.iter().map(|v| ("cancel", *v)).collect();
    let outcomes = w.sdk_clients("/sdk", &runs).await;
    for ((scenario, version), o) in runs.iter().zip(&outcomes) {
        o.assert_ran(&[SUBMITTED, WORKING, CANCELED]);
        w.admin
            .charged(&subject("/sdk", scenario, version), 5, 0)
            .await;
    }
    // The cancels reached the agent: it has exactly these two tasks, both canceled.
    let resp = w
        .http
        .post(format!("http://127.0.0.1:{}/a2a/jsonrpc", w.agent.port))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    let states: Vec<&Value> = v["result"]["tasks"]
        .as_array()
        .map(|t| t.iter().map(|t| &t["status"]["state"]).collect())
        .unwrap_or_default();
    assert_eq!(states, [CANCELED, CANCELED, CANCELED], "{v}");
    // The same over HTTP+JSON, to the agent whose card offers only that.
    let outcomes = w.sdk_clients("/rest", &runs).await;
    for ((scenario, version), o) in runs.iter().zip(&outcomes) {
        o.assert_ran(&[SUBMITTED, WORKING, CANCELED]);
        w.admin
            .charged(&subject("/rest", scenario, version), 5, 0)
            .await;
    }
    let resp = w
        .http
        .get(format!(
            "http://127.0.0.1:{}/a2a/rest/tasks",
            w.rest_agent.port
        ))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    let states: Vec<&Value> = v["tasks"]
        .as_array()
        .map(|t| t.iter().map(|t| &t["status"]["state"]).collect())
        .unwrap_or_default();
    assert_eq!(states, [CANCELED, CANCELED, CANCELED], "{v}");
}

// ------------------------------------------------ the card is followed when the agent moves

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_is_read_again_when_the_agent_moves_its_interface() {
    let python = tokio::task::spawn_blocking(peers_python).await.unwrap();
    let first = sdk_agent(&python, Duration::ZERO, &["--interfaces", "JSONRPC@1.0"]).await;
    let port = first.port;
    let rest = format!(
        r#"
[[upstreams]]
name = "sdk"
address = "127.0.0.1:{port}"
read_timeout = "5s"
"#
    );
    let rest = rest + &paid_route("moving", "/moving", "sdk", "nevermined", "a2a", "");
    let proxy = Proxy::start(&paid_config(&rest));
    let w = World {
        admin: Admin::new(&proxy),
        proxy,
        http: client(),
        python: python.clone(),
        agent: first,
        // Not used here: the moving agent stands in.
        rest_agent: sdk_agent(&python, Duration::ZERO, &["--interfaces", "JSONRPC@1.0"]).await,
    };
    let sub = "mover";
    w.admin.grant(sub, 10).await;
    let done = nv_run(&w, "/moving", sub, "before the move").await;
    assert_eq!(done["task"]["output"], "BEFORE THE MOVE", "{done}");

    // The agent comes back on the same port with JSON-RPC elsewhere (its card says where): the
    // cached card names a path that is now a 404, so interlingua reads the card again and calls
    // the new path, within the card's 5-minute ttl.
    drop(w.agent);
    let moved = sdk_agent(
        &python,
        Duration::ZERO,
        &[
            "--port",
            &port.to_string(),
            "--rpc-path",
            "/moved/rpc",
            "--interfaces",
            "JSONRPC@1.0",
        ],
    )
    .await;
    assert_eq!(moved.port, port);
    let w = World { agent: moved, ..w };
    let done = nv_run(&w, "/moving", sub, "after the move").await;
    assert_eq!(done["task"]["output"], "AFTER THE MOVE", "{done}");
    assert_eq!(done["task"]["task_status"], "Completed", "{done}");
    w.admin.charged(sub, 10, 2).await;
}

/// A Nevermined task on `prefix` with `query`, polled until it ends; its last body.
async fn nv_run(w: &World, prefix: &str, sub: &str, query: &str) -> Value {
    let id = w.nv_create(prefix, sub, query).await;
    let path = format!("{prefix}/api/v1/agents/{DID}/tasks/{id}");
    let (_, done) = w.nv_poll(&path, sub, &["Completed", "Failed"]).await;
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn card_url_is_read_on_the_routes_upstream_whatever_host_it_names() {
    let w = world(WORK).await;
    let sub = "card-user";
    w.admin.grant(sub, 5).await;
    // Availability is the card, read where card_url says (its path, on the agent).
    let (status, v) = w
        .call(reqwest::Method::GET, "/jobcard/availability", sub, None)
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v,
        json!({
            "status": "available",
            "type": "masumi-agent",
            "message": "Upper-cases the text of the user message (test peer built on a2a-sdk)."
        })
    );
    let (status, v) = w
        .call(
            reqwest::Method::POST,
            "/jobcard/start_job",
            sub,
            Some(json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "by the card"}})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let job = v["job_id"].as_str().unwrap().to_string();
    let (_, done) = w
        .poll(
            &format!("/jobcard/status?job_id={job}"),
            sub,
            |b| b["status"].as_str().unwrap_or("?").to_string(),
            &["completed", "failed"],
        )
        .await;
    assert_eq!(
        (done["status"].as_str(), done["result"].as_str()),
        (Some("completed"), Some("BY THE CARD")),
        "{done}"
    );
    w.admin.charged(sub, 5, 1).await;
}
