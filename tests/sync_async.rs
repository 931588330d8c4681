//! What the engine supplies between synchronous and asynchronous sides: a back that answers only
//! with the result is run in the background for a front that polls; a front that wants the result
//! waits (polling the back, with backoff) up to the route's `sync_timeout`.
//!
//! The synchronous side is a test dialect, `tests/fixtures/mappings/sync_echo.toml`.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::wait::eventually;
use common::{client, config, full, sample_agent, sample_agent_on, Proxy, Upstream};
use mapping::task::Status;
use samples::Clock;
use serde_json::{json, Value};
use tokio::sync::Notify;

const DID: &str = "did:nv:0000000000000000000000000000000000000000000000000000000000000002";

/// How long a job of the sample agent takes, by the clock the test moves.
const WORK: Duration = Duration::from_millis(400);

fn fixtures() -> String {
    format!(
        "mappings_dir = \"{}/tests/fixtures/mappings\"",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn route(addr: SocketAddr, front: &str, back: &str, extra: &str) -> String {
    config(
        &fixtures(),
        &format!(
            "[[upstreams]]\nname = \"up\"\naddress = \"{addr}\"\n\n[[routes]]\nname = \"r\"\n\
             match = {{ path_prefix = \"/\" }}\nupstream = \"up\"\nfront = \"{front}\"\nback = \"{back}\"\n{extra}\n"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronous_back_runs_in_the_background_for_a_polling_front() {
    let release = Arc::new(Notify::new());
    let r = release.clone();
    let upstream = Upstream::start(move |_req| {
        let r = r.clone();
        async move {
            r.notified().await;
            hyper::Response::builder()
                .status(200)
                .body(full(r#"{"status":"done","output":"BACKGROUND"}"#))
                .unwrap()
        }
    })
    .await;
    let proxy = Proxy::start(&route(upstream.addr, "nevermined", "sync_echo", ""));
    let http = client();
    let tasks = proxy.url(&format!("/api/v1/agents/{DID}/tasks"));
    let created: Value = http
        .post(&tasks)
        .json(&json!({"input_query": "run me"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // Answered while the back is still working on it.
    assert_eq!(created["task"]["task_status"], "Pending", "{created}");
    upstream.wait_for_requests(1).await;
    let path = format!("{tasks}/{}", created["task"]["task_id"].as_str().unwrap());
    let pending: Value = http.get(&path).send().await.unwrap().json().await.unwrap();
    assert_eq!(pending["task"]["task_status"], "Pending");

    release.notify_one();
    let done = eventually("the task to complete", || async {
        let body: Value = http.get(&path).send().await.unwrap().json().await.unwrap();
        if body["task"]["task_status"] == "Completed" {
            Ok(body)
        } else {
            Err(body)
        }
    })
    .await;
    assert_eq!(done["task"]["output"], "BACKGROUND");
    assert_eq!(upstream.seen().len(), 1, "the back is called once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronous_front_waits_for_an_asynchronous_back() {
    let clock = Clock::manual();
    let addr = sample_agent_on(samples::mip003::serve, WORK, &clock).await;
    let proxy = Proxy::start(&route(
        addr,
        "sync_echo",
        "mip003",
        "poll_interval = \"50ms\"\npoll_max_interval = \"100ms\"",
    ));
    let answer = tokio::spawn(
        client()
            .post(proxy.url("/run"))
            .json(&json!({"prompt": "hello"}))
            .send(),
    );
    // The job has started; halfway through, the proxy has seen it running and still waits.
    proxy
        .latest_task("started at the agent", |t| t.upstream_id.is_some())
        .await;
    clock.advance(WORK / 2);
    proxy
        .latest_task("seen running", |t| t.status == Status::Running)
        .await;
    assert!(!answer.is_finished(), "it waits for the job");
    clock.advance(WORK / 2);
    let resp = answer.await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["status"], "done", "{body}");
    assert_eq!(body["output"], "HELLO");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronous_front_gets_504_at_its_sync_timeout() {
    // A job whose clock never moves: it outlasts any sync_timeout.
    let addr = sample_agent_on(samples::mip003::serve, WORK, &Clock::manual()).await;
    let proxy = Proxy::start(&route(
        addr,
        "sync_echo",
        "mip003",
        "sync_timeout = \"300ms\"\npoll_interval = \"50ms\"",
    ));
    let started = Instant::now();
    let resp = client()
        .post(proxy.url("/run"))
        .json(&json!({"prompt": "slow"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 504);
    let body: Value = resp.json().await.unwrap();
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains("did not finish within sync_timeout (300ms)"),
        "{message}"
    );
    // Real time: sync_timeout is the proxy's own timer, which no test clock reaches. The lower
    // bound is what is tested (not answered before the timeout), the upper one only that it ends.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_is_synthesized_from_the_route_and_the_mappings() {
    let addr = sample_agent(samples::mip003::serve, Duration::from_millis(100)).await;
    let proxy = Proxy::start(&route(addr, "sync_echo", "mip003", ""));
    let resp = client().get(proxy.url("/describe")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["name"], "r");
    assert_eq!(body["title"], "Masumi MIP-003 Agentic Service API");
    assert_eq!(body["operations"], json!(["create_task", "describe"]));
    // The back's own input schema, fetched from the agent.
    assert_eq!(body["input"], samples::mip003::input_schema());
}
