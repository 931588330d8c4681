//! Money through the real proxy: holds when tasks are created (402 when the balance cannot cover
//! them), one capture per completed step whatever the number of polls, releases when tasks end,
//! settlement after a SIGKILL and restart, and rate limits.

mod common;

use std::cell::Cell;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::money::{paid_config, paid_route, Admin};
use common::process::{interlingua, serve};
use common::secrets::{auth_table, token, ADMIN_TOKEN};
use common::wait::eventually;
use common::{client, config, sample_agent, sample_agent_on, Proxy, Upstream};
use samples::Clock;
use serde_json::{json, Value};
use store::Account;
use store::{SqliteStore, TaskStore};

const DID: &str = "did:nv:0000000000000000000000000000000000000000000000000000000000000003";

/// How long a job of the agents here takes, by a clock the test moves when it wants the job done.
const WORK: Duration = Duration::from_millis(300);

/// A priced Nevermined-front route `paid` to a MIP-003 agent (upstream `mip`): each task holds 1
/// credit and costs 1. The data directory is `data_dir`.
fn priced(agent: SocketAddr, data_dir: &str) -> String {
    let route = paid_route("paid", "/", "mip", "nevermined", "mip003", "");
    paid_config(&format!(
        "[[upstreams]]\nname = \"mip\"\naddress = \"{agent}\"\nread_timeout = \"5s\"\n{route}"
    ))
    .replace("{data_dir}", data_dir)
}

async fn create(proxy: &Proxy, bearer: &str, body: Value) -> reqwest::Response {
    client()
        .post(proxy.url(&format!("/api/v1/agents/{DID}/tasks")))
        .bearer_auth(bearer)
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// The ledger recomputed from its rows matches the account's running totals.
async fn assert_recomputes(data_dir: &Path, subject: &str) {
    let store = SqliteStore::open(data_dir).unwrap();
    let account = Account::new("gold", subject);
    assert_eq!(
        store.recompute(&account).await.unwrap(),
        store.balance(&account).await.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_200_concurrent_tasks_exactly_the_50_the_balance_covers_are_accepted() {
    let agent = sample_agent(samples::mip003::serve, Duration::from_millis(200)).await;
    let proxy = Proxy::start(&priced(agent, "{data_dir}"));
    let admin = Admin::new(&proxy);
    let granted = admin.grant("alice", 50).await;
    assert_eq!(granted["available"], 50);

    let bearer = token("alice");
    let attempts: Vec<_> = (0..200)
        .map(|i| {
            let url = proxy.url(&format!("/api/v1/agents/{DID}/tasks"));
            let bearer = bearer.clone();
            tokio::spawn(async move {
                let resp = client()
                    .post(url)
                    .bearer_auth(bearer)
                    .json(&json!({"input_query": format!("task {i}")}))
                    .send()
                    .await
                    .unwrap();
                let status = resp.status().as_u16();
                (status, resp.json::<Value>().await.unwrap())
            })
        })
        .collect();
    let mut accepted = 0;
    let mut refused = Vec::new();
    for a in attempts {
        let (status, body) = a.await.unwrap();
        match status {
            201 => accepted += 1,
            402 => refused.push(body),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(accepted, 50);
    assert_eq!(refused.len(), 150);
    assert_eq!(
        refused[0],
        json!({"statusCode": 402, "message": "insufficient credits: the task needs 1, the balance has 0",
               "error": "Payment Required", "balance": 0, "price": 1})
    );

    // The watcher follows every task to its end, without any client polling.
    let b = admin.settled("alice").await;
    assert_eq!(
        (
            b["granted"].as_i64(),
            b["captured"].as_i64(),
            b["available"].as_i64()
        ),
        (Some(50), Some(50), Some(0))
    );
    let rows = admin.history("alice").await;
    let count = |kind: &str| rows.iter().filter(|r| r["kind"] == kind).count();
    assert_eq!(
        (count("grant"), count("hold"), count("capture")),
        (1, 50, 50)
    );
    assert_recomputes(&proxy.data_dir(), "alice").await;

    proxy
        .metrics_showing(&[
            r#"interlingua_credits_total{kind="held"} 50"#,
            r#"interlingua_credits_total{kind="captured"} 50"#,
            r#"interlingua_rejections_total{reason="402"} 150"#,
        ])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_polled_100_times_is_captured_once() {
    let clock = Clock::manual();
    let agent = sample_agent_on(samples::mip003::serve, WORK, &clock).await;
    let proxy = Proxy::start(&priced(agent, "{data_dir}"));
    let admin = Admin::new(&proxy);
    admin.grant("bob", 5).await;
    let bearer = token("bob");
    let created: Value = create(&proxy, &bearer, json!({"input_query": "count me once"}))
        .await
        .json()
        .await
        .unwrap();
    let task_id = created["task"]["task_id"].as_str().unwrap().to_string();
    let path = proxy.url(&format!("/api/v1/agents/{DID}/tasks/{task_id}"));
    let http = client();
    let (reported, polls) = (Cell::new(0u64), Cell::new(0));
    // One poll, counted, with what it reports charged: the task's status.
    let poll = || async {
        let resp = http.get(&path).bearer_auth(&bearer).send().await.unwrap();
        let charged = resp.headers()["nvmcreditsconsumed"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap();
        let body: Value = resp.json().await.unwrap();
        reported.set(reported.get() + charged);
        polls.set(polls.get() + 1);
        body["task"]["task_status"].as_str().unwrap().to_string()
    };
    // The agent's clock stands still: the job cannot finish while these look at it.
    for _ in 0..50 {
        assert_ne!(poll().await, "Completed");
    }
    clock.advance(WORK);
    eventually("the job done", || async {
        match poll().await {
            s if s == "Completed" => Ok(()),
            s => Err(s),
        }
    })
    .await;
    while polls.get() < 100 {
        assert_eq!(poll().await, "Completed");
    }
    let reported = reported.get();
    assert!(
        reported <= 1,
        "a charge is reported once at most: {reported}"
    );
    let b = admin.settled("bob").await;
    assert_eq!(
        (b["captured"].as_i64(), b["available"].as_i64()),
        (Some(1), Some(4))
    );
    let captures: Vec<Value> = admin
        .history("bob")
        .await
        .into_iter()
        .filter(|r| r["kind"] == "capture")
        .collect();
    assert_eq!(captures.len(), 1);
    assert_eq!(captures[0]["amount"], 1);
    let done: Value = http
        .get(&path)
        .bearer_auth(&bearer)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["task"]["cost"], 1, "the price is on the task");
    assert_recomputes(&proxy.data_dir(), "bob").await;

    // Another subject cannot see bob's task.
    let other = http
        .get(&path)
        .bearer_auth(token("mallory"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
}

/// One task on `proxy` (a [`priced`] route), polled by `pollers` clients at once, round after
/// round, while its job finishes (the agent's `clock` is moved on once the clients have polled
/// it running `before` times in all): every poll answers 200, the task ends completed, and its
/// ledger is exactly one hold, one capture of its one step and one release, with nothing held,
/// at most one poll reporting the charge, and `credits verify` clean.
async fn polled_at_once(proxy: &Proxy, clock: &Clock, pollers: usize, before: usize) {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::Arc;

    let admin = Admin::new(proxy);
    admin.grant("pat", 5).await;
    let bearer = token("pat");
    let created: Value = create(proxy, &bearer, json!({"input_query": "polled by many"}))
        .await
        .json()
        .await
        .unwrap();
    let task_id = created["task"]["task_id"].as_str().unwrap().to_string();
    let path = proxy.url(&format!("/api/v1/agents/{DID}/tasks/{task_id}"));
    // The store's id: the front's, without the dialect's prefix.
    let stored_id = task_id.trim_start_matches("task-");
    let (polls, reported) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicU64::new(0)));
    let pollers: Vec<_> = (0..pollers)
        .map(|_| {
            let (path, bearer) = (path.clone(), bearer.clone());
            let (polls, reported) = (polls.clone(), reported.clone());
            tokio::spawn(async move {
                let http = client();
                loop {
                    let resp = http.get(&path).bearer_auth(&bearer).send().await.unwrap();
                    assert_eq!(resp.status(), 200);
                    let charged: u64 = resp.headers()["nvmcreditsconsumed"]
                        .to_str()
                        .unwrap()
                        .parse()
                        .unwrap();
                    reported.fetch_add(charged, Ordering::SeqCst);
                    polls.fetch_add(1, Ordering::SeqCst);
                    let body: Value = resp.json().await.unwrap();
                    if body["task"]["task_status"] == "Completed" {
                        return;
                    }
                }
            })
        })
        .collect();
    eventually("the clients to poll the running task", || async {
        let n = polls.load(Ordering::SeqCst);
        if n >= before {
            Ok(())
        } else {
            Err(n)
        }
    })
    .await;
    clock.advance(WORK);
    for p in pollers {
        p.await.unwrap();
    }
    let b = admin.settled("pat").await;
    assert_eq!(
        (b["captured"].as_i64(), b["available"].as_i64()),
        (Some(1), Some(4)),
        "{b}"
    );
    assert!(reported.load(Ordering::SeqCst) <= 1);
    let rows: Vec<(String, i64, Option<String>)> = admin
        .history("pat")
        .await
        .iter()
        .rev()
        .filter(|r| r["kind"] != "grant")
        .map(|r| {
            assert_eq!(r["task_id"].as_str(), Some(stored_id), "{r}");
            (
                r["kind"].as_str().unwrap().to_string(),
                r["amount"].as_i64().unwrap(),
                r["step_id"].as_str().map(str::to_string),
            )
        })
        .collect();
    let kinds: Vec<(&str, i64)> = rows.iter().map(|(k, a, _)| (k.as_str(), *a)).collect();
    assert_eq!(
        kinds,
        [("hold", 1), ("capture", 1), ("release", 0)],
        "{rows:?}"
    );
    assert!(rows[1].2.is_some(), "the capture names its step: {rows:?}");
    let verify = client()
        .get(proxy.admin_url("/credits/verify"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let (status, report) = common::status_and_json(verify).await;
    assert_eq!(
        (status, report["ok"].as_bool()),
        (200, Some(true)),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_polled_by_100_clients_at_once_is_charged_exactly_once() {
    let clock = Clock::manual();
    let agent = sample_agent_on(samples::mip003::serve, WORK, &clock).await;
    let proxy = Proxy::start(&priced(agent, "{data_dir}"));
    polled_at_once(&proxy, &clock, 100, 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_polled_by_100_clients_at_once_is_charged_exactly_once_on_postgresql() {
    let pg = testkit::postgres::Postgres::start();
    let clock = Clock::manual();
    let agent = sample_agent_on(samples::mip003::serve, WORK, &clock).await;
    let config = priced(agent, "{data_dir}").replacen(
        "[[upstreams]]",
        &format!(
            "[store]\nurl = \"{}\"\n\n[[upstreams]]",
            pg.database("polled")
        ),
        1,
    );
    let proxy = Proxy::start(&config);
    polled_at_once(&proxy, &clock, 100, 200).await;
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(12))]

    /// However the refreshes of one task interleave (clients' polls, each asking the agent or
    /// taking what another stored within `min_refresh`, and the watcher's own polls, often or
    /// rarely), a task that ends is settled exactly once: one hold, one capture, one release.
    #[test]
    fn every_interleaving_of_polls_and_the_watcher_settles_a_task_once(
        pollers in 1usize..48,
        before in 0usize..96,
        min_refresh in proptest::sample::select(vec!["0s", "5ms", "50ms", "250ms"]),
        poll_interval in proptest::sample::select(vec!["5ms", "50ms", "2s"]),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let clock = Clock::manual();
            let agent = sample_agent_on(samples::mip003::serve, WORK, &clock).await;
            let config = priced(agent, "{data_dir}")
                .replace("min_refresh = \"50ms\"", &format!("min_refresh = \"{min_refresh}\""))
                .replace("poll_interval = \"50ms\"", &format!("poll_interval = \"{poll_interval}\""))
                .replace("poll_max_interval = \"200ms\"", &format!("poll_max_interval = \"{poll_interval}\""));
            let proxy = Proxy::start(&config);
            polled_at_once(&proxy, &clock, pollers, before).await;
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_task_charges_nothing() {
    let agent = sample_agent(samples::mip003::serve, Duration::from_millis(200)).await;
    let proxy = Proxy::start(&priced(agent, "{data_dir}"));
    let admin = Admin::new(&proxy);
    admin.grant("carol", 3).await;
    let resp = create(
        &proxy,
        &token("carol"),
        json!({"input_query": "x", "input_additional": {"mode": "fail"}}),
    )
    .await;
    assert_eq!(resp.status(), 201);
    assert_eq!(admin.balance("carol").await["held"], 1);
    let b = admin.settled("carol").await;
    assert_eq!(
        (b["captured"].as_i64(), b["available"].as_i64()),
        (Some(0), Some(3))
    );
    let kinds: Vec<String> = admin
        .history("carol")
        .await
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, ["release", "hold", "grant"]);
    assert_recomputes(&proxy.data_dir(), "carol").await;
}

fn cli_balance(config: &Path, subject: &str) -> Value {
    let out = interlingua()
        .args([
            "credits",
            "balance",
            "--plan",
            "gold",
            "--subject",
            subject,
            "-c",
            config.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The subject's balance, as `interlingua credits balance` reads it, once nothing is held any
/// more.
async fn cli_settled(config: &Path, subject: &str) -> Value {
    eventually(&format!("{subject} to settle"), || async {
        let b = cli_balance(config, subject);
        if b["held"] == 0 {
            Ok(b)
        } else {
            Err(b)
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_running_when_the_proxy_is_killed_settle_exactly_once_after_a_restart() {
    // The jobs are half done when the first proxy is killed, and stand still until it is gone.
    let clock = Clock::manual();
    let agent = sample_agent_on(samples::mip003::serve, WORK, &clock).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("interlingua.toml");
    std::fs::write(
        &file,
        priced(agent, &dir.path().join("data").display().to_string()),
    )
    .unwrap();
    let out = interlingua()
        .args([
            "credits",
            "grant",
            "--plan",
            "gold",
            "--subject",
            "dave",
            "--amount",
            "10",
            "-c",
            file.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let first = serve(&file, Stdio::null());
    let addr = first.proxy;
    let bearer = token("dave");
    let http = client();
    for i in 0..5 {
        let resp = http
            .post(format!("http://{addr}/api/v1/agents/{DID}/tasks"))
            .bearer_auth(&bearer)
            .json(&json!({"input_query": format!("survive {i}")}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
    }
    clock.advance(WORK / 2);
    // Killed mid-flight: no graceful anything.
    first.kill();
    let during = cli_balance(&file, "dave");
    assert_eq!(during["held"], 5, "{during}");
    clock.advance(WORK / 2);

    let second = serve(&file, Stdio::null());
    let settled = cli_settled(&file, "dave").await;
    second.kill();
    assert_eq!(
        (settled["captured"].as_i64(), settled["available"].as_i64()),
        (Some(5), Some(5)),
        "{settled}"
    );
    let store = SqliteStore::open(&dir.path().join("data")).unwrap();
    let account = Account::new("gold", "dave");
    let rows = store.history(&account, 1000).await.unwrap();
    let mut captured: Vec<&str> = rows
        .iter()
        .filter(|r| r.kind == "capture")
        .filter_map(|r| r.task_id.as_deref())
        .collect();
    captured.sort_unstable();
    captured.dedup();
    assert_eq!(captured.len(), 5, "every task captured exactly once");
    assert_eq!(rows.iter().filter(|r| r.kind == "capture").count(), 5);
    assert_eq!(
        store.recompute(&account).await.unwrap(),
        store.balance(&account).await.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_running_across_a_restart_with_a_new_price_keeps_the_price_it_started_under() {
    let clock = Clock::manual();
    let agent = sample_agent_on(samples::mip003::serve, WORK, &clock).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("interlingua.toml");
    let data = dir.path().join("data").display().to_string();
    let config = |step: u64| {
        let text = priced(agent, &data);
        assert!(text.contains("price = { hold = 1, step = 1 }"), "{text}");
        text.replace(
            "price = { hold = 1, step = 1 }",
            &format!("price = {{ hold = 5, step = {step} }}"),
        )
    };
    std::fs::write(&file, config(2)).unwrap();
    let grant = interlingua()
        .args(["credits", "grant", "--plan", "gold", "--subject", "erin"])
        .args(["--amount", "20", "-c", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(grant.status.success());
    let bearer = token("erin");
    let start = |addr: SocketAddr, query: &'static str| {
        let bearer = bearer.clone();
        async move {
            let resp = client()
                .post(format!("http://{addr}/api/v1/agents/{DID}/tasks"))
                .bearer_auth(&bearer)
                .json(&json!({ "input_query": query }))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 201);
        }
    };

    // Started at 2 a step; the operator raises the price to 7 and restarts while it runs.
    let first = serve(&file, Stdio::null());
    start(first.proxy, "started at 2").await;
    clock.advance(WORK / 2);
    first.kill();
    std::fs::write(&file, config(7)).unwrap();
    clock.advance(WORK / 2);
    let second = serve(&file, Stdio::null());
    let settled = cli_settled(&file, "erin").await;
    assert_eq!(
        (settled["captured"].as_i64(), settled["available"].as_i64()),
        (Some(2), Some(18)),
        "{settled}"
    );
    // A task started now pays the new price.
    start(second.proxy, "started at 7").await;
    clock.advance(WORK);
    let settled = cli_settled(&file, "erin").await;
    second.kill();
    assert_eq!(
        (settled["captured"].as_i64(), settled["available"].as_i64()),
        (Some(9), Some(11)),
        "{settled}"
    );
    assert_recomputes(&dir.path().join("data"), "erin").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_over_the_rate_limit_gets_429_and_other_subjects_are_unaffected() {
    let upstream = Upstream::ok().await;
    let proxy = Proxy::start(&config(
        "",
        &format!(
            "{}\n[[upstreams]]\nname = \"up\"\naddress = \"{}\"\n\n\
             [[routes]]\nname = \"limited\"\nmatch = {{ path_prefix = \"/limited\" }}\nupstream = \"up\"\nauth = true\n\
             rate_limit = {{ per_subject = \"1/m, burst 2\" }}\n\n\
             [[routes]]\nname = \"open\"\nmatch = {{ path_prefix = \"/open\" }}\nupstream = \"up\"\n\
             rate_limit = {{ per_client = \"1/h\" }}\n",
            auth_table(),
            upstream.addr
        ),
    ));
    let http = client();
    let get = |path: &str, sub: Option<&str>| {
        let mut r = http.get(proxy.url(path));
        if let Some(s) = sub {
            r = r.bearer_auth(token(s));
        }
        r.send()
    };
    assert_eq!(get("/limited", Some("alice")).await.unwrap().status(), 200);
    assert_eq!(get("/limited", Some("alice")).await.unwrap().status(), 200);
    let refused = get("/limited", Some("alice")).await.unwrap();
    assert_eq!(refused.status(), 429);
    let retry: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((59..=60).contains(&retry), "{retry}");
    assert_eq!(
        refused.headers()["ratelimit-policy"],
        "\"subject\";q=1;w=60"
    );
    assert_eq!(
        refused.headers()["ratelimit"].to_str().unwrap(),
        format!("\"subject\";r=0;t={retry}")
    );
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    // Another subject has its own allowance.
    assert_eq!(get("/limited", Some("bob")).await.unwrap().status(), 200);

    // Without auth, the client's address is the key.
    assert_eq!(get("/open", None).await.unwrap().status(), 200);
    let refused = get("/open", None).await.unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(
        refused.headers()["ratelimit-policy"],
        "\"client\";q=1;w=3600"
    );
    assert_eq!(
        upstream.seen().len(),
        4,
        "refused requests never went upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operation_fees_are_charged_once_per_request_id() {
    // A clock that never moves: the task runs for the whole test.
    let agent = sample_agent_on(samples::mip003::serve, WORK, &Clock::manual()).await;
    let cfg = priced(agent, "{data_dir}").replace(
        "price = { hold = 1, step = 1 }",
        "price = { hold = 5, step = 1, operations = { get_task = 2 } }",
    );
    let proxy = Proxy::start(&cfg);
    let admin = Admin::new(&proxy);
    admin.grant("erin", 10).await;
    let bearer = token("erin");
    let created: Value = create(&proxy, &bearer, json!({"input_query": "fees"}))
        .await
        .json()
        .await
        .unwrap();
    let path = proxy.url(&format!(
        "/api/v1/agents/{DID}/tasks/{}",
        created["task"]["task_id"].as_str().unwrap()
    ));
    let http = client();
    for request_id in ["poll-1", "poll-1", "poll-2"] {
        let resp = http
            .get(&path)
            .bearer_auth(&bearer)
            .header("x-request-id", request_id)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    let b = admin.balance("erin").await;
    // Two distinct request ids, 2 credits each, taken from the task's hold of 5.
    assert_eq!(
        (
            b["captured"].as_i64(),
            b["held"].as_i64(),
            b["available"].as_i64()
        ),
        (Some(4), Some(1), Some(5))
    );
    assert_recomputes(&proxy.data_dir(), "erin").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_needs_its_token_and_revokes_only_what_is_available() {
    let agent = sample_agent(samples::mip003::serve, Duration::from_millis(100)).await;
    let proxy = Proxy::start(&priced(agent, "{data_dir}"));
    let http = client();
    let url = |p: &str| proxy.admin_url(p);
    let no_token = http
        .get(url("/credits/balance?plan=gold&subject=x"))
        .send()
        .await
        .unwrap();
    assert_eq!(no_token.status(), 401);
    assert_eq!(
        no_token.headers()["www-authenticate"],
        "Bearer realm=\"interlingua-admin\""
    );
    let wrong = http
        .get(url("/credits/balance?plan=gold&subject=x"))
        .bearer_auth("guess")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    // Health stays open.
    assert_eq!(
        http.get(url("/healthz")).send().await.unwrap().status(),
        200
    );

    let admin = Admin::new(&proxy);
    admin.grant("frank", 3).await;
    let revoke = |amount: u64| {
        http.post(url("/credits/revoke"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({"plan": "gold", "subject": "frank", "amount": amount}))
            .send()
    };
    let too_much = revoke(4).await.unwrap();
    assert_eq!(too_much.status(), 409);
    let ok: Value = revoke(2).await.unwrap().json().await.unwrap();
    assert_eq!(
        (ok["granted"].as_i64(), ok["available"].as_i64()),
        (Some(1), Some(1))
    );

    let created: Value = create(
        &proxy,
        &token("frank"),
        json!({"input_query": "admin can read me"}),
    )
    .await
    .json()
    .await
    .unwrap();
    let id = created["task"]["task_id"]
        .as_str()
        .unwrap()
        .trim_start_matches("task-")
        .to_string();
    let task: Value = http
        .get(url(&format!("/tasks/{id}")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(task["task"]["id"], id.as_str());
    assert_eq!(task["task"]["subject"], "frank");
    assert_eq!(task["task"]["plan"], "gold");
    let missing = http
        .get(url("/tasks/nope"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronous_call_lost_with_a_killed_proxy_fails_its_task_and_frees_its_hold() {
    // A chat model whose clock never moves: it is still thinking when the proxy is killed.
    let model = sample_agent_on(samples::openai::serve, WORK, &Clock::manual()).await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("interlingua.toml");
    // A Nevermined front over a chat model: the model answers only when done.
    let config = priced(model, &data.display().to_string())
        .replace("back = \"mip003\"", "back = \"openai_chat\"")
        .replace("name = \"mip\"", "name = \"chat\"")
        .replace("upstream = \"mip\"", "upstream = \"chat\"");
    std::fs::write(&file, config).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    let store = SqliteStore::open(&data).unwrap();
    store
        .grant(&Account::new("gold", "erin"), 10, None)
        .await
        .unwrap();
    drop(store);

    let first = serve(&file, Stdio::null());
    let resp = client()
        .post(format!("http://{}/api/v1/agents/{DID}/tasks", first.proxy))
        .bearer_auth(token("erin"))
        .json(&json!({"input_query": "think hard"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let task: Value = resp.json().await.unwrap();
    let id = task["task"]["task_id"]
        .as_str()
        .unwrap()
        .trim_start_matches("task-")
        .to_string();
    first.kill();
    assert_eq!(cli_balance(&file, "erin")["held"], 1);

    // After the restart nobody is waiting for that call any more: the task fails, at no cost.
    let second = serve(&file, Stdio::null());
    let settled = cli_settled(&file, "erin").await;
    second.kill();
    assert_eq!(
        (settled["captured"].as_i64(), settled["available"].as_i64()),
        (Some(0), Some(10)),
        "{settled}"
    );
    let stored = SqliteStore::open(&data)
        .unwrap()
        .get(&id)
        .await
        .unwrap()
        .expect("the task");
    assert_eq!(
        (stored.task.status.name(), stored.task.reason.as_deref()),
        ("failed", Some("interrupted"))
    );
}
