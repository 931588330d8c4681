//! Tasks that can never end, through the real proxy (issue 16, points 7–9): a body nested too
//! deep is refused at the front in its own shape, before anything is held or stored; a stored
//! task that cannot be read is ended and its hold released; a create in flight when the process
//! is killed leaves no task pending forever; and `credits verify` (CLI and admin API) finds
//! nothing afterwards, and finds a seeded inconsistency.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::money::{ledger, paid_config, paid_route, rows, Admin};
use common::process::{interlingua, serve};
use common::secrets::{token, ADMIN_TOKEN};
use common::wait::eventually;
use common::{client, full, sample_agent, status_and_json, Proxy, Upstream};
use mapping::task::Task;
use serde_json::{json, Value};
use store::Account;
use store::{SqliteStore, TaskQuery, TaskStore};

const DID: &str = "did:nv:0000000000000000000000000000000000000000000000000000000000000003";

/// `levels` arrays, one in the other, around `inner`.
fn nested(levels: usize, inner: Value) -> Value {
    (0..levels).fold(inner, |v, _| json!([v]))
}

/// A MIP-003 agent behind three paid fronts: `/m` MIP-003, `/n` Nevermined, `/a` A2A; each
/// task holds 1 credit. `work`: how long its jobs take.
async fn three_fronts(work: Duration) -> (Proxy, Admin) {
    let agent = sample_agent(samples::mip003::serve, work).await;
    let mut rest = format!("[[upstreams]]\nname = \"mip\"\naddress = \"{agent}\"\n");
    for (name, front) in [("m", "mip003"), ("n", "nevermined"), ("a", "a2a")] {
        rest.push_str(&paid_route(
            name,
            &format!("/{name}"),
            "mip",
            front,
            "mip003",
            "",
        ));
    }
    let proxy = Proxy::start(&paid_config(&rest));
    let admin = Admin::new(&proxy);
    (proxy, admin)
}

/// The tasks `store` holds (the first ten, newest first).
async fn tasks_stored(store: &SqliteStore) -> Vec<Task> {
    let query = TaskQuery {
        page: 1,
        page_size: 10,
        ..TaskQuery::default()
    };
    store.search(&query).await.unwrap().0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_nested_too_deep_is_refused_in_each_fronts_shape_before_anything_is_held() {
    let (proxy, admin) = three_fronts(Duration::from_millis(100)).await;
    admin.grant("ann", 5).await;
    let http = client();
    let bearer = token("ann");
    let send = |path: &str, body: Value| {
        http.post(proxy.url(path))
            .bearer_auth(&bearer)
            .json(&body)
            .send()
    };
    // 125 levels deep, as the requests were: each front's body puts it a few levels
    // further down.
    let deep = nested(120, json!("x"));
    let message = |depth: usize| {
        format!("the body nests {depth} levels deep; this route takes at most 64 (max_json_depth)")
    };

    let mip = json!({"identifier_from_purchaser": "aabbccddeeff00", "input_data": {"text": deep}});
    let (status, body) = status_and_json(send("/m/start_job", mip).await.unwrap()).await;
    assert_eq!(
        (status, body),
        (400, json!({"detail": message(122)})),
        "MIP-003"
    );

    let nvm = json!({"input_query": "deep", "input_additional": {"deep": deep}});
    let path = format!("/n/api/v1/agents/{DID}/tasks");
    let (status, body) = status_and_json(send(&path, nvm).await.unwrap()).await;
    assert_eq!(
        (status, body),
        (
            400,
            json!({"statusCode": 400, "message": message(122), "error": "Bad Request"})
        ),
        "Nevermined"
    );

    let a2a = json!({"jsonrpc": "2.0", "id": 9, "method": "SendMessage", "params": {"message": {
        "messageId": "m-1", "role": "ROLE_USER", "parts": [{"data": {"deep": deep}}]}}});
    let (status, body) = status_and_json(send("/a", a2a).await.unwrap()).await;
    // A body that could not be read has no id to echo (JSON-RPC's parse error).
    assert_eq!(
        (status, body),
        (
            200,
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": message(126)}})
        ),
        "A2A"
    );

    // Nothing held, nothing stored.
    assert_eq!(ledger(&admin, "ann").await, rows(&[("grant", 5)]));
    assert_eq!(admin.balance("ann").await["held"], 0);
    let store = SqliteStore::open(&proxy.data_dir()).unwrap();
    assert_eq!(tasks_stored(&store).await, []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_at_the_depth_limit_round_trips_and_one_level_more_is_refused() {
    let (proxy, admin) = three_fronts(Duration::from_millis(100)).await;
    admin.grant("bob", 5).await;
    let http = client();
    let path = format!("/n/api/v1/agents/{DID}/tasks");
    // The body's object, input_additional's object, its `deep` array: 3 levels around it.
    let at_limit = json!({"deep": nested(61, json!({"x": "y"}))});
    let over = json!({"deep": nested(62, json!({"x": "y"}))});

    let resp = http
        .post(proxy.url(&path))
        .bearer_auth(token("bob"))
        .json(&json!({"input_query": "deep", "input_additional": over}))
        .send()
        .await
        .unwrap();
    let (status, body) = status_and_json(resp).await;
    assert_eq!(
        (status, body["message"].as_str()),
        (
            400,
            Some("the body nests 65 levels deep; this route takes at most 64 (max_json_depth)")
        )
    );

    let resp = http
        .post(proxy.url(&path))
        .bearer_auth(token("bob"))
        .json(&json!({"input_query": "deep", "input_additional": at_limit}))
        .send()
        .await
        .unwrap();
    let (status, created) = status_and_json(resp).await;
    assert_eq!(status, 201, "{created}");
    let id = created["task"]["task_id"].as_str().unwrap().to_string();
    let task = eventually("the task to complete", || async {
        let resp = http
            .get(proxy.url(&format!("/n/api/v1/agents/{DID}/tasks/{id}")))
            .bearer_auth(token("bob"))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let (status, v) = status_and_json(resp).await;
        match (status, v["task"]["task_status"].as_str()) {
            (200, Some("Completed")) => Ok(v),
            _ => Err(format!("{status} {v}")),
        }
    })
    .await;
    assert_eq!(task["task"]["input_additional"], at_limit);
    admin.charged("bob", 5, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_task_that_cannot_be_read_is_ended_and_its_hold_released() {
    // Jobs that outlast the test: only the unreadable row can end these tasks.
    let (proxy, admin) = three_fronts(Duration::from_secs(600)).await;
    admin.grant("cat", 5).await;
    let http = client();
    let create = || async {
        let resp = http
            .post(proxy.url(&format!("/n/api/v1/agents/{DID}/tasks")))
            .bearer_auth(token("cat"))
            .json(&json!({"input_query": "forever"}))
            .send()
            .await
            .unwrap();
        let (status, v) = status_and_json(resp).await;
        assert_eq!(status, 201, "{v}");
        v["task"]["task_id"].as_str().unwrap().to_string()
    };
    let (watched, polled) = (create().await, create().await);
    assert_eq!(admin.balance("cat").await["held"], 2);

    // As an older version wrote them: one too deep to decode, one not JSON at all.
    let db = rusqlite::Connection::open(proxy.data_dir().join("interlingua.db")).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    let too_deep = format!("{{\"id\":{}}}", nested(130, json!(1)));
    for (id, doc) in [(&watched, too_deep.as_str()), (&polled, "{\"id\": broken")] {
        let bare = id.trim_start_matches("task-");
        let n = db
            .execute(
                // A new version: a watcher's update of the version it read loses the race.
                "UPDATE tasks SET doc = ?1, version = version + 1 WHERE id = ?2",
                rusqlite::params![doc, bare],
            )
            .unwrap();
        assert_eq!(n, 1);
    }
    drop(db);

    // The client asks: the task is ended where it is read, and the answer is the ended task.
    let resp = http
        .get(proxy.url(&format!("/n/api/v1/agents/{DID}/tasks/{polled}")))
        .bearer_auth(token("cat"))
        .send()
        .await
        .unwrap();
    let (status, v) = status_and_json(resp).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["task"]["task_status"], "Failed", "{v}");
    assert_eq!(v["task"]["task_id"], polled.as_str());

    // Nobody asks: the watcher ends it, once.
    let settled = admin.settled("cat").await;
    assert_eq!(
        (settled["held"].as_i64(), settled["captured"].as_i64()),
        (Some(0), Some(0))
    );
    let mut ledger = ledger(&admin, "cat").await;
    ledger[1..3].sort();
    ledger[3..5].sort();
    assert_eq!(
        ledger,
        rows(&[
            ("grant", 5),
            ("hold", 1),
            ("hold", 1),
            ("release", 1),
            ("release", 1)
        ])
    );
    for id in [&watched, &polled] {
        let resp = http
            .get(proxy.admin_url(&format!("/tasks/{}", id.trim_start_matches("task-"))))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        let (status, v) = status_and_json(resp).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(
            (v["task"]["status"].as_str(), v["task"]["reason"].as_str()),
            (Some("failed"), Some("unreadable")),
            "{v}"
        );
    }
    let store = SqliteStore::open(&proxy.data_dir()).unwrap();
    let account = Account::new("gold", "cat");
    assert_eq!(
        store.recompute(&account).await.unwrap(),
        store.balance(&account).await.unwrap()
    );
}

/// `interlingua credits verify -c <config>`: its exit code and its report.
fn cli_verify(config: &Path) -> (Option<i32>, Value) {
    let out = interlingua()
        .args(["credits", "verify", "-c", config.to_str().unwrap()])
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), report)
}

/// `GET /credits/verify` on the admin listener at `admin`.
async fn admin_verify(admin: SocketAddr) -> (u16, Value) {
    let resp = client()
        .get(format!("http://{admin}/credits/verify"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    status_and_json(resp).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_in_flight_when_the_proxy_is_killed_fails_as_interrupted_after_a_restart() {
    // An agent that takes every create and never answers it.
    let agent = Upstream::start(|_req| async {
        std::future::pending::<()>().await;
        hyper::Response::new(full(""))
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("interlingua.toml");
    let route = paid_route("paid", "/", "mip", "nevermined", "mip003", "");
    let config = paid_config(&format!(
        "[[upstreams]]\nname = \"mip\"\naddress = \"{}\"\nread_timeout = \"60s\"\ntotal_timeout = \"60s\"\n{route}",
        agent.addr
    ))
    .replace("{data_dir}", &data.display().to_string());
    std::fs::write(&file, config).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    let account = Account::new("gold", "zed");
    SqliteStore::open(&data)
        .unwrap()
        .grant(&account, 10, None)
        .await
        .unwrap();

    let first = serve(&file, Stdio::null());
    let url = format!("http://{}/api/v1/agents/{DID}/tasks", first.proxy);
    // Never answered: the proxy is killed while it waits.
    let pending = tokio::spawn(
        client()
            .post(url)
            .bearer_auth(token("zed"))
            .json(&json!({"input_query": "never answered"}))
            .send(),
    );
    agent.wait_for_requests(1).await;
    let store = SqliteStore::open(&data).unwrap();
    let tasks = tasks_stored(&store).await;
    assert_eq!(tasks.len(), 1);
    let id = tasks[0].id.clone();
    assert_eq!(
        (tasks[0].status.name(), tasks[0].upstream_id.as_deref()),
        ("pending", None)
    );
    assert_eq!(store.balance(&account).await.unwrap().held, 1);
    first.kill();
    let _ = pending.await;

    let second = serve(&file, Stdio::null());
    let ended = eventually("the task to fail", || async {
        match store.get(&id).await {
            Ok(Some(s)) if s.task.status.is_terminal() => Ok(s.task),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(
        (ended.status.name(), ended.reason.as_deref()),
        ("failed", Some("interrupted"))
    );
    let balance = store.balance(&account).await.unwrap();
    assert_eq!((balance.held, balance.captured), (0, 0));
    let history: Vec<(String, i64, Option<String>)> = store
        .history(&account, 100)
        .await
        .unwrap()
        .into_iter()
        .rev()
        .map(|r| (r.kind, r.amount, r.task_id))
        .collect();
    assert_eq!(
        history,
        [
            ("grant".to_string(), 10, None),
            ("hold".to_string(), 1, Some(id.clone())),
            ("release".to_string(), 1, Some(id.clone())),
        ]
    );

    let clean = json!({"ok": true, "accounts": [], "holds": [], "tasks_without_upstream_id": [], "sales": [], "masumi_sales": [], "costs": []});
    assert_eq!(cli_verify(&file), (Some(0), clean.clone()));
    assert_eq!(admin_verify(second.admin).await, (200, clean));

    // Seeded: a balance that no longer adds up to its rows, and the ended task's hold open
    // again.
    let db = rusqlite::Connection::open(data.join("interlingua.db")).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    db.execute_batch(
        "UPDATE accounts SET held = held + 3 WHERE subject = 'zed';
         UPDATE holds SET open = 1;",
    )
    .unwrap();
    let found = json!({
        "ok": false,
        "accounts": [{"plan": "gold", "subject": "zed",
            "balance": {"granted": 10, "captured": 0, "held": 3},
            "from_rows": {"granted": 10, "captured": 0, "held": 0}}],
        "holds": [{"task_id": id, "plan": "gold", "subject": "zed", "remaining": 0,
            "problem": "task_ended", "route": "paid", "status": "failed"}],
        "tasks_without_upstream_id": [],
        "sales": [],
        "masumi_sales": [],
        "costs": [],
    });
    assert_eq!(cli_verify(&file), (Some(1), found.clone()));
    assert_eq!(admin_verify(second.admin).await, (200, found));
    second.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_answer_too_deep_to_keep_fails_its_task_and_releases_the_hold() {
    // A MIP-003 agent whose payment request nests as deep as a JSON reader goes (127 levels):
    // kept in the task, it would make the task one level too deep to read back.
    let agent = Upstream::start(|_req| async {
        let answer = json!({"job_id": "j-1", "status": "running",
                            "blockchainIdentifier": nested(126, json!(1))});
        hyper::Response::new(full(answer.to_string()))
    })
    .await;
    let route = paid_route("paid", "/", "mip", "nevermined", "mip003", "");
    let proxy = Proxy::start(&paid_config(&format!(
        "[[upstreams]]\nname = \"mip\"\naddress = \"{}\"\n{route}",
        agent.addr
    )));
    let admin = Admin::new(&proxy);
    admin.grant("dan", 5).await;
    let http = client();
    let resp = http
        .post(proxy.url(&format!("/api/v1/agents/{DID}/tasks")))
        .bearer_auth(token("dan"))
        .json(&json!({"input_query": "hello"}))
        .send()
        .await
        .unwrap();
    let (status, body) = status_and_json(resp).await;
    assert_eq!(
        (status, body),
        (
            502,
            json!({"statusCode": 502, "error": "Bad Gateway", "message":
                "upstream `mip` answered something the `mip003` mapping cannot read: its answer would make the task nest 128 levels deep; the store reads at most 127"})
        )
    );
    assert_eq!(
        ledger(&admin, "dan").await,
        rows(&[("grant", 5), ("hold", 1), ("release", 1)])
    );
    let store = SqliteStore::open(&proxy.data_dir()).unwrap();
    let tasks = tasks_stored(&store).await;
    assert_eq!(tasks.len(), 1);
    assert_eq!(
        (tasks[0].status.name(), tasks[0].reason.as_deref()),
        ("failed", Some("upstream_invalid_response"))
    );
    // Readable, and answered.
    let resp = http
        .get(proxy.url(&format!("/api/v1/agents/{DID}/tasks/task-{}", tasks[0].id)))
        .bearer_auth(token("dan"))
        .send()
        .await
        .unwrap();
    let (status, v) = status_and_json(resp).await;
    assert_eq!(
        (status, v["task"]["task_status"].as_str()),
        (200, Some("Failed")),
        "{v}"
    );
}

#[test]
fn max_json_depth_is_between_one_and_what_keeps_every_task_readable() {
    for (depth, problem) in [
        (
            "0",
            Some("t.toml:8:18: routes[0].max_json_depth: must be between 1 and 100"),
        ),
        (
            "101",
            Some("t.toml:8:18: routes[0].max_json_depth: must be between 1 and 100"),
        ),
        ("100", None),
    ] {
        let text = format!(
            "[[listeners]]\naddress = \"127.0.0.1:0\"\n[[upstreams]]\nname = \"a\"\naddress = \"127.0.0.1:9\"\n\
             [[routes]]\nmatch = {{ path_prefix = \"/\" }}\nmax_json_depth = {depth}\nupstream = \"a\"\n\
             front = \"mip003\"\nback = \"mip003\"\n"
        );
        let found = match interlingua::setup::parse(&text, "t.toml") {
            Ok(_) => None,
            Err(problems) => Some(problems.iter().map(|p| p.to_string()).collect::<Vec<_>>()),
        };
        assert_eq!(
            found,
            problem.map(|p| vec![p.to_string()]),
            "max_json_depth = {depth}"
        );
    }
}

/// The sample MIP-003 agent at `agent`, until `forgot` is set: from then on it answers every
/// status request `404 Job not found`, as an agent that restarted and lost its jobs does.
async fn forgetful(
    agent: SocketAddr,
    forgot: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Upstream {
    use std::sync::atomic::Ordering;
    Upstream::start(move |req: hyper::Request<hyper::body::Incoming>| {
        let forgot = forgot.clone();
        async move {
            if forgot.load(Ordering::SeqCst) && req.uri().path().starts_with("/status") {
                return common::answer(
                    404,
                    bytes::Bytes::from_static(b"{\"detail\":\"Job not found\"}"),
                );
            }
            let (status, answer) = common::forward(agent, req).await;
            common::answer(status, answer)
        }
    })
    .await
}

/// An agent that no longer knows a task it was following (it restarted): for a while the task
/// is answered as interlingua knows it (running, not a 404 the client could take for its own
/// task gone); once the agent has said so for the route's `lost_after`, the task fails as
/// `upstream_lost` and its hold is released, instead of being polled, and held, for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_its_agent_no_longer_knows_fails_after_lost_after_and_frees_its_hold() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let forgot = Arc::new(AtomicBool::new(false));
    let agent = sample_agent(samples::mip003::serve, Duration::from_secs(3600)).await;
    let front = forgetful(agent, forgot.clone()).await;
    let rest = format!(
        "[[upstreams]]\nname = \"mip\"\naddress = \"{}\"\n{}",
        front.addr,
        paid_route(
            "n",
            "/n",
            "mip",
            "nevermined",
            "mip003",
            "lost_after = \"1s\""
        )
    );
    let proxy = Proxy::start(&paid_config(&rest));
    let admin = Admin::new(&proxy);
    admin.grant("lou", 3).await;
    let bearer = token("lou");
    let http = client();
    let created: Value = http
        .post(proxy.url(&format!("/n/api/v1/agents/{DID}/tasks")))
        .bearer_auth(&bearer)
        .json(&json!({"input_query": "forget me"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["task"]["task_id"].as_str().unwrap().to_string();
    let url = proxy.url(&format!("/n/api/v1/agents/{DID}/tasks/{id}"));
    let poll = || async {
        let resp = http.get(&url).bearer_auth(&bearer).send().await.unwrap();
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap();
        (status, body)
    };
    let (status, before) = poll().await;
    assert_eq!(status, 200, "{before}");

    forgot.store(true, Ordering::SeqCst);
    // Said once: the task as interlingua knows it, not the agent's 404.
    let (status, body) = poll().await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["task"]["task_status"], before["task"]["task_status"],
        "{body}"
    );
    // Said for lost_after: failed, its hold released, nothing charged.
    let failed = eventually("the task failed as lost", || async {
        let (status, body) = poll().await;
        if status == 200 && body["task"]["task_status"] == "Failed" {
            Ok(body)
        } else {
            Err(format!("{status} {body}"))
        }
    })
    .await;
    assert!(
        failed["task"]["output"]
            .as_str()
            .is_some_and(|o| o.contains("no longer knows this task (Job not found)")),
        "{failed}"
    );
    assert_eq!(
        ledger(&admin, "lou").await,
        rows(&[("grant", 3), ("hold", 1), ("release", 1)])
    );
    let (status, report) = admin_verify(proxy.admin).await;
    assert_eq!(
        (status, report["ok"].as_bool()),
        (200, Some(true)),
        "{report}"
    );
}
