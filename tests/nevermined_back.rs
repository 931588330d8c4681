//! A Nevermined agent behind interlingua asks for input the way real ones do: it marks the waiting
//! *step* (`is_waiting`, `Not_Ready`) and leaves its task `In_Progress`. interlingua reads that as
//! the task waiting for input, and carries the answer back through the step update on that step.
//! Seen from a MIP-003 client (plain HTTP) and from the real A2A SDK's client, on paid routes,
//! with the ledger's rows.

mod common;

use std::time::Duration;

use common::money::{paid_config, paid_route, Admin};
use common::peers::{peers_python, run_script};
use common::secrets::token;
use common::wait::eventually;
use common::{client, sample_agent_on, status_and_json, Proxy, Upstream, DEADLINE};
use samples::Clock;
use serde_json::{json, Value};

const DID: &str = "did:nv:5392e8cdc5addec2b7384072fda166d42a5d4ab96ae6d311f516b6b324f24cec";

/// How long a sample job takes in these tests.
const WORK: Duration = Duration::from_millis(400);

/// The sample Nevermined agent behind `/mip` (a MIP-003 front) and `/a2a` (an A2A front, and
/// `/free`, the same without auth), its tasks going by `clock`.
async fn world(clock: &Clock) -> (Proxy, Admin) {
    let nvm = sample_agent_on(samples::nevermined::serve, WORK, clock).await;
    world_at(nvm).await
}

/// [`world`] with the agent at `nvm`.
async fn world_at(nvm: std::net::SocketAddr) -> (Proxy, Admin) {
    let vars = format!("vars.nevermined = {{ agent_did = \"{DID}\" }}\nsync_timeout = \"10s\"");
    let rest = format!(
        "[[upstreams]]\nname = \"nvm\"\naddress = \"{nvm}\"\nread_timeout = \"5s\"\n{}{}",
        paid_route("mip", "/mip", "nvm", "mip003", "nevermined", &vars),
        paid_route("a2a", "/a2a", "nvm", "a2a", "nevermined", &vars),
    ) + &format!(
        "\n[[routes]]\nname = \"a2a-free\"\nmatch = {{ path_prefix = \"/free\" }}\nupstream = \"nvm\"\n\
         front = \"a2a\"\nback = \"nevermined\"\n{vars}\n"
    );
    let proxy = Proxy::start(&paid_config(&rest));
    let admin = Admin::new(&proxy);
    (proxy, admin)
}

/// The subject's ledger rows, oldest first: (kind, amount), the grant first.
async fn rows(admin: &Admin, sub: &str) -> Vec<(String, i64)> {
    admin
        .history(sub)
        .await
        .iter()
        .rev()
        .map(|r| {
            (
                r["kind"].as_str().unwrap().to_string(),
                r["amount"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// What the sample agent's four steps cost at the route's price: a hold of 1, then each
/// completed step (init, work, ask, finish) 1.
fn four_steps_charged() -> Vec<(String, i64)> {
    [
        ("grant", 10),
        ("hold", 1),
        ("capture", 1),
        ("capture", 1),
        ("capture", 1),
        ("capture", 1),
        ("release", 0),
    ]
    .iter()
    .map(|(k, a)| (k.to_string(), *a))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mip003_client_answers_the_waiting_step_of_a_nevermined_agent() {
    // The task moves on when the test has made its move: asked for input, then given it.
    let clock = Clock::manual();
    let (proxy, admin) = world(&clock).await;
    let sub = "mip-client";
    admin.grant(sub, 10).await;
    let http = client();
    let bearer = token(sub);
    let get = |path: String| {
        let (http, bearer, url) = (http.clone(), bearer.clone(), proxy.url(&path));
        async move { status_and_json(http.get(url).bearer_auth(bearer).send().await.unwrap()).await }
    };
    let resp = http
        .post(proxy.url("/mip/start_job"))
        .bearer_auth(&bearer)
        .json(&json!({"identifier_from_purchaser": "aabbccddeeff0011",
                      "input_data": {"text": "hello world", "mode": "input"}}))
        .send()
        .await
        .unwrap();
    let (status, started) = status_and_json(resp).await;
    assert_eq!(status, 200, "{started}");
    let job_id = started["job_id"].as_str().unwrap().to_string();
    let status_path = format!("/mip/status?job_id={job_id}");

    // The agent's task is In_Progress with a waiting step: the job awaits input.
    clock.advance(WORK);
    let waiting = eventually("awaiting_input", || async {
        let (code, body) = get(status_path.clone()).await;
        assert_eq!(code, 200, "{body}");
        if body["status"] == "awaiting_input" {
            Ok(body)
        } else {
            Err(body)
        }
    })
    .await;
    assert_eq!(
        waiting["input_schema"],
        json!({"input_data": [{"id": "more", "type": "text", "name": "More details"}]})
    );

    let resp = http
        .post(proxy.url("/mip/provide_input"))
        .bearer_auth(&bearer)
        .json(&json!({"job_id": job_id, "status_id": waiting["id"],
                      "input_data": {"more": "please"}}))
        .send()
        .await
        .unwrap();
    let (status, provided) = status_and_json(resp).await;
    // The sample agent accepts the input only on its waiting step (400 on any other).
    assert_eq!(status, 200, "{provided}");

    clock.advance(WORK);
    let done = eventually("completed", || async {
        let (_, body) = get(status_path.clone()).await;
        if body["status"] == "completed" {
            Ok(body)
        } else {
            Err(body)
        }
    })
    .await;
    assert_eq!(done["result"], "HELLO WORLD please");
    admin.charged(sub, 10, 4).await;
    assert_eq!(rows(&admin, sub).await, four_steps_charged());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_sdk_client_answers_the_waiting_step_of_a_nevermined_agent() {
    // Real time: the SDK's client, not the test, polls the task through each of its states.
    let (proxy, admin) = world(&Clock::default()).await;
    let sub = "a2a-client";
    admin.grant(sub, 10).await;
    let (url, bearer) = (proxy.url("/a2a"), token(sub));
    let out = a2a_client(&[
        "--url",
        &url,
        "--scenario",
        "input",
        "--timeout",
        "15",
        "--token",
        &bearer,
    ])
    .await;
    assert_eq!(
        out["states"],
        json!([
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
            "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED"
        ]),
        "{out}"
    );
    // The agent upper-cases the first text and appends the answer to its question.
    assert_eq!(
        out["artifact_text"], "HELLO MODE:INPUT more please",
        "{out}"
    );
    assert_eq!(
        out["status_messages"],
        json!(["The agent needs more input: More details"]),
        "{out}"
    );
    admin.charged(sub, 10, 4).await;
    assert_eq!(rows(&admin, sub).await, four_steps_charged());
}

/// What `a2a_client.py` (the a2a-sdk's client) printed, run with `args`; it must succeed.
async fn a2a_client(args: &[&str]) -> Value {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let ran = tokio::task::spawn_blocking(move || {
        run_script(&peers_python(), "a2a_client.py", &args, DEADLINE)
    })
    .await
    .unwrap();
    assert!(ran.status.success(), "{}\n{}", ran.stdout, ran.stderr);
    serde_json::from_str(ran.stdout.trim()).unwrap()
}

/// The sample Nevermined agent at `agent` behind a hub that is slow to show an input taken: for
/// a moment after a step update carries the input (the next [`LAG`] reads of the task), the task
/// reads as it did before, its step still waiting, as a hub whose agent picks the step up in its
/// own time shows it.
async fn slow_hub(agent: std::net::SocketAddr) -> Upstream {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    const LAG: usize = 3;
    let before: Arc<Mutex<Option<(u16, bytes::Bytes)>>> = Arc::default();
    let lag = Arc::new(AtomicUsize::new(0));
    Upstream::start(move |req: hyper::Request<hyper::body::Incoming>| {
        let (before, lag) = (before.clone(), lag.clone());
        async move {
            let method = req.method().clone();
            let is_read = method == hyper::Method::GET && req.uri().path().contains("/tasks/");
            if is_read && lag.load(Ordering::SeqCst) > 0 {
                lag.fetch_sub(1, Ordering::SeqCst);
                if let Some((status, old)) = before.lock().unwrap().clone() {
                    return common::answer(status, old);
                }
            }
            let (status, answer) = common::forward(agent, req).await;
            if is_read {
                *before.lock().unwrap() = Some((status, answer.clone()));
            } else if method == hyper::Method::PUT {
                lag.store(LAG, Ordering::SeqCst);
            }
            common::answer(status, answer)
        }
    })
    .await
}

/// A blocking send that carries the answer to the agent's question follows the task as a
/// blocking create does: its answer is the task completed, with the agent's output, not the
/// task as it was when the input went in, even while the agent still shows its question for a
/// moment (A2A's `SendMessage` without `returnImmediately`, on both bindings, with and without
/// auth).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_send_with_the_input_answers_the_task_completed() {
    let nvm = sample_agent_on(samples::nevermined::serve, WORK, &Clock::default()).await;
    let hub = slow_hub(nvm).await;
    let (proxy, admin) = world_at(hub.addr).await;
    let sub = "blocking-client";
    admin.grant(sub, 10).await;
    for binding in ["JSONRPC", "HTTP+JSON"] {
        for (prefix, bearer) in [("/a2a", Some(token(sub))), ("/free", None)] {
            let url = proxy.url(prefix);
            let mut args = vec![
                "--url",
                &url,
                "--scenario",
                "blocking_input",
                "--binding",
                binding,
                "--timeout",
                "15",
            ];
            if let Some(t) = &bearer {
                args.extend(["--token", t]);
            }
            let out = a2a_client(&args).await;
            let kinds: Vec<&str> = out["events"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|e| e["kind"].as_str())
                .collect();
            assert_eq!(
                kinds,
                ["task", "follow-up", "task"],
                "{binding} {prefix}: {out}"
            );
            assert_eq!(
                out["events"][0]["state"], "TASK_STATE_INPUT_REQUIRED",
                "{binding} {prefix}: {out}"
            );
            assert_eq!(
                out["events"][2]["state"], "TASK_STATE_COMPLETED",
                "{binding} {prefix}: {out}"
            );
            assert_eq!(
                out["artifact_text"], "HELLO MODE:INPUT more please",
                "{binding} {prefix}: {out}"
            );
        }
    }
    admin.charged(sub, 10, 8).await;
}

/// A streamed follow-up that carries the answer streams the task to its end too, not only to the
/// moment the agent still shows its question (A2A's `SendStreamingMessage` with the task id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_send_with_the_input_streams_the_task_to_its_end() {
    let nvm = sample_agent_on(samples::nevermined::serve, WORK, &Clock::default()).await;
    let hub = slow_hub(nvm).await;
    let (proxy, _admin) = world_at(hub.addr).await;
    let url = proxy.url("/free");
    let out = a2a_client(&[
        "--url",
        &url,
        "--scenario",
        "stream_input",
        "--timeout",
        "15",
    ])
    .await;
    let events = out["events"].as_array().unwrap();
    let follow_up = events
        .iter()
        .position(|e| e["kind"] == "follow-up")
        .unwrap_or_else(|| panic!("no follow-up: {out}"));
    assert_eq!(
        events[follow_up - 1]["state"],
        "TASK_STATE_INPUT_REQUIRED",
        "{out}"
    );
    assert_eq!(out["final_state"], "TASK_STATE_COMPLETED", "{out}");
    assert_eq!(
        out["artifact_text"], "HELLO MODE:INPUT more please",
        "{out}"
    );
}
