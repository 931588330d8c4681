//! Nothing waits forever, and whoever waits hears promptly: a task left waiting for input past
//! its route's `input_timeout` ends (cancelled, `expired`, its hold released); a client that
//! blocks on a task past `sync_timeout` gets the task to poll (A2A) or a 504 naming it (chat),
//! while the task goes on and settles; and many clients polling one task within `min_refresh`
//! cost the agent one call, and polls that wait behind a refresh one call per wave.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::money::{paid_config, paid_route, Admin};
use common::secrets::token;
use common::wait::eventually;
use common::{client, config, sample_agent, sample_agent_on, status_and_json, Proxy, Upstream};
use samples::Clock;
use serde_json::{json, Value};

/// A JSON-RPC 1.0 call to interlingua's A2A front at `url`.
async fn rpc(http: &reqwest::Client, url: &str, auth: &str, method: &str, params: Value) -> Value {
    let resp = http
        .post(url)
        .bearer_auth(auth)
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .expect("the A2A front answers");
    let (status, body) = status_and_json(resp).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// How long a job of the sample agent takes, by the clock the test moves.
const WORK: Duration = Duration::from_millis(400);

fn message(text: &str) -> Value {
    json!({"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": text}]})
}

/// The state of the A2A task `id`, and the task.
async fn a2a_state(http: &reqwest::Client, url: &str, auth: &str, id: &str) -> (String, Value) {
    let got = rpc(http, url, auth, "GetTask", json!({"id": id})).await;
    let task = got["result"].clone();
    let state = task["status"]["state"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (state, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_left_waiting_for_input_past_input_timeout_is_cancelled_and_its_hold_released() {
    let agent = sample_agent(samples::mip003::serve, Duration::from_millis(100)).await;
    let proxy = Proxy::start(&paid_config(&format!(
        "[[upstreams]]\nname = \"mip\"\naddress = \"{agent}\"\n{}",
        paid_route(
            "wait",
            "/wait",
            "mip",
            "a2a",
            "mip003",
            "input_timeout = \"1s\""
        )
    )));
    let admin = Admin::new(&proxy);
    admin.grant("waiter", 5).await;
    let (http, auth, url) = (client(), token("waiter"), proxy.url("/wait/"));

    let sent = rpc(
        &http,
        &url,
        &auth,
        "SendMessage",
        json!({"message": message("hello mode:input"), "configuration": {"returnImmediately": true}}),
    )
    .await;
    let id = sent["result"]["task"]["id"]
        .as_str()
        .expect("a task id")
        .to_string();
    eventually("the task to wait for input", || async {
        match a2a_state(&http, &url, &auth, &id).await {
            (s, _) if s == "TASK_STATE_INPUT_REQUIRED" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(admin.balance("waiter").await["held"], 1);

    // Nobody answers: once input_timeout is up, interlingua ends the task itself.
    let task = eventually("the task to expire", || async {
        match a2a_state(&http, &url, &auth, &id).await {
            (s, t) if s == "TASK_STATE_CANCELED" => Ok(t),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let said = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        said.contains("waited for input longer than input_timeout (1s)"),
        "{task}"
    );
    admin.charged("waiter", 5, 0).await;
    let kinds: Vec<(String, i64)> = admin
        .history("waiter")
        .await
        .iter()
        .filter(|r| r["task_id"] == id.as_str())
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or_default().to_string(),
                r["amount"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![("release".to_string(), 1), ("hold".to_string(), 1)],
        "newest first: the hold, then its release; nothing captured"
    );

    // Input after the end is refused, in A2A's words.
    let late = rpc(
        &http,
        &url,
        &auth,
        "SendMessage",
        json!({"message": {"messageId": "m-2", "taskId": id, "role": "ROLE_USER", "parts": [{"text": "too late"}]}}),
    )
    .await;
    assert!(late["error"]["code"].is_i64(), "{late}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_a2a_send_past_sync_timeout_answers_the_working_task_which_goes_on() {
    // The job stands still until the client has had its answer; sync_timeout is the proxy's
    // own, in real time.
    let clock = Clock::manual();
    let agent = sample_agent_on(samples::mip003::serve, WORK, &clock).await;
    let proxy = Proxy::start(&paid_config(&format!(
        "[[upstreams]]\nname = \"mip\"\naddress = \"{agent}\"\n{}",
        paid_route(
            "slow",
            "/slow",
            "mip",
            "a2a",
            "mip003",
            "sync_timeout = \"500ms\""
        )
    )));
    let admin = Admin::new(&proxy);
    admin.grant("patient", 5).await;
    let (http, auth, url) = (client(), token("patient"), proxy.url("/slow/"));

    // Blocking (no returnImmediately): the answer is the task as it is at sync_timeout.
    let sent = rpc(
        &http,
        &url,
        &auth,
        "SendMessage",
        json!({"message": message("slow one")}),
    )
    .await;
    assert!(sent.get("error").is_none(), "not an error: {sent}");
    let task = &sent["result"]["task"];
    let state = task["status"]["state"].as_str().unwrap_or_default();
    assert!(
        state == "TASK_STATE_WORKING" || state == "TASK_STATE_SUBMITTED",
        "still going: {sent}"
    );
    let id = task["id"]
        .as_str()
        .expect("the task's id, to poll")
        .to_string();

    clock.advance(WORK);
    let done = eventually("the task to complete", || async {
        match a2a_state(&http, &url, &auth, &id).await {
            (s, t) if s == "TASK_STATE_COMPLETED" => Ok(t),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(
        done["artifacts"][0]["parts"][0]["text"], "SLOW ONE",
        "{done}"
    );
    admin.charged("patient", 5, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_client_past_sync_timeout_gets_504_naming_the_task_which_goes_on() {
    let clock = Clock::manual();
    let agent = sample_agent_on(samples::mip003::serve, WORK, &clock).await;
    let proxy = Proxy::start(&paid_config(&format!(
        "[[upstreams]]\nname = \"mip\"\naddress = \"{agent}\"\n{}",
        paid_route(
            "chat",
            "/chat",
            "mip",
            "openai_chat",
            "mip003",
            "sync_timeout = \"500ms\""
        )
    )));
    let admin = Admin::new(&proxy);
    admin.grant("chatty", 5).await;
    let resp = client()
        .post(proxy.url("/chat/v1/chat/completions"))
        .bearer_auth(token("chatty"))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "slow one"}]}))
        .send()
        .await
        .unwrap();
    let (status, body) = status_and_json(resp).await;
    assert_eq!(status, 504, "{body}");
    let said = body["error"]["message"].as_str().unwrap_or_default();
    // "upstream `mip` timed out: task `<id>` did not finish …"
    let id = said
        .split('`')
        .nth(3)
        .expect("the message names the task between backquotes");
    assert!(uuid_like(id), "{said}");
    assert!(
        said.contains("did not finish within sync_timeout (500ms)"),
        "{said}"
    );
    // The task goes on and is charged when it completes.
    clock.advance(WORK);
    admin.charged("chatty", 5, 1).await;
    let rows = admin.history("chatty").await;
    assert!(
        rows.iter()
            .any(|r| r["task_id"] == id && r["kind"] == "capture"),
        "{rows:?}"
    );
}

/// How many `GET /status` calls `agent` has answered.
fn status_calls(agent: &Upstream) -> usize {
    agent
        .seen()
        .iter()
        .filter(|s| s.target.starts_with("/status"))
        .count()
}

fn uuid_like(s: &str) -> bool {
    s.len() == 36 && s.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polls_of_one_task_within_min_refresh_make_one_call_to_the_agent() {
    let agent = common::forever_running_agent().await;
    // The watcher's first look is an hour away: every call the agent sees is a client's poll.
    let quiet = "poll_interval = \"1h\"\npoll_max_interval = \"1h\"";
    let proxy = Proxy::start(&config(
        "",
        &format!(
            "[[upstreams]]\nname = \"up\"\naddress = \"{}\"\n\n\
             [[routes]]\nname = \"coalesced\"\nmatch = {{ path_prefix = \"/c\" }}\nupstream = \"up\"\n\
             front = \"mip003\"\nback = \"mip003\"\nmin_refresh = \"1h\"\n{quiet}\n\n\
             [[routes]]\nname = \"each\"\nmatch = {{ path_prefix = \"/e\" }}\nupstream = \"up\"\n\
             front = \"mip003\"\nback = \"mip003\"\nmin_refresh = \"0s\"\n{quiet}\n",
            agent.addr
        ),
    ));
    let http = client();
    let start = |prefix: &'static str| {
        let http = http.clone();
        let url = proxy.url(&format!("{prefix}/start_job"));
        async move {
            let resp = http
                .post(url)
                .json(&json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "x"}}))
                .send()
                .await
                .unwrap();
            let (status, body) = status_and_json(resp).await;
            assert_eq!(status, 200, "{body}");
            body["job_id"].as_str().expect("a job id").to_string()
        }
    };
    let status_calls = || status_calls(&agent);
    let poll = |prefix: &'static str, job: String| {
        let http = http.clone();
        let url = proxy.url(&format!("{prefix}/status?job_id={job}"));
        async move {
            let (status, body) = status_and_json(http.get(url).send().await.unwrap()).await;
            assert_eq!(
                (status, body["status"].as_str()),
                (200, Some("running")),
                "{body}"
            );
        }
    };

    let job = start("/c").await;
    // Ten at once, then ten one after another.
    futures_util::future::join_all((0..10).map(|_| poll("/c", job.clone()))).await;
    for _ in 0..10 {
        poll("/c", job.clone()).await;
    }
    assert_eq!(
        status_calls(),
        1,
        "twenty polls within min_refresh: one call"
    );

    // Without coalescing each poll is a call: the count above is not one by accident.
    let job = start("/e").await;
    for _ in 0..5 {
        poll("/e", job.clone()).await;
    }
    assert_eq!(status_calls(), 1 + 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polls_waiting_behind_a_refresh_take_the_next_one_not_a_call_each() {
    // The agent holds its first status answer until every poll below waits behind it.
    let release = Arc::new(tokio::sync::Notify::new());
    let hold = Arc::new(AtomicBool::new(true));
    let agent = Upstream::start({
        let (release, hold) = (release.clone(), hold.clone());
        move |req| {
            let (release, hold) = (release.clone(), hold.clone());
            async move {
                let path = req.uri().path().to_string();
                if path == "/status" && hold.swap(false, Ordering::SeqCst) {
                    release.notified().await;
                }
                common::forever_running(&path)
            }
        }
    })
    .await;
    // Every poll asks the agent (`min_refresh` 0s); the watcher's first look is an hour away.
    let proxy = Proxy::start(&config(
        "",
        &format!(
            "[[upstreams]]\nname = \"up\"\naddress = \"{}\"\n\n\
             [[routes]]\nname = \"each\"\nmatch = {{ path_prefix = \"/e\" }}\nupstream = \"up\"\n\
             front = \"mip003\"\nback = \"mip003\"\nmin_refresh = \"0s\"\n\
             poll_interval = \"1h\"\npoll_max_interval = \"1h\"\n",
            agent.addr
        ),
    ));
    let http = client();
    let resp = http
        .post(proxy.url("/e/start_job"))
        .json(
            &json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "x"}}),
        )
        .send()
        .await
        .unwrap();
    let (status, body) = status_and_json(resp).await;
    assert_eq!(status, 200, "{body}");
    let url = proxy.url(&format!(
        "/e/status?job_id={}",
        body["job_id"].as_str().unwrap()
    ));
    let poll = || {
        let (http, url) = (http.clone(), url.clone());
        tokio::spawn(async move {
            let (status, body) = status_and_json(http.get(url).send().await.unwrap()).await;
            assert_eq!(
                (status, body["status"].as_str()),
                (200, Some("running")),
                "{body}"
            );
        })
    };
    let status_calls = || status_calls(&agent);

    // The first poll's refresh reaches the agent and is held there; nine more arrive meanwhile.
    let first = poll();
    eventually("the first poll to reach the agent", || async {
        if status_calls() == 1 {
            Ok(())
        } else {
            Err(status_calls())
        }
    })
    .await;
    let rest: Vec<_> = (0..9).map(|_| poll()).collect();
    let metrics = proxy.admin_url("/metrics");
    eventually("ten polls in flight", || async {
        let text = client()
            .get(&metrics)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("interlingua_requests_in_flight "))
            .unwrap_or("")
            .to_string();
        if line.ends_with(" 10") {
            Ok(())
        } else {
            Err(line)
        }
    })
    .await;
    release.notify_one();
    first.await.unwrap();
    for p in rest {
        p.await.unwrap();
    }
    // The nine arrived after the held refresh began: the first of them to pass the gate asks
    // again; that refresh began after the other eight arrived, and they take it.
    assert_eq!(status_calls(), 2, "ten polls, two waves: two calls");
}
