//! interlingua buys jobs from a Masumi agent: the real `masumi` 1.2.0 package as the MIP-003 agent
//! behind a priced route with auth and a payment service, and a stand-in of the Masumi payment
//! node (`tests/peers/payment_standin.py`) that plays both sides at once, as the real nodes do
//! between them: the agent's job starts only once the purchase interlingua made has locked the
//! funds. Each test checks what the client sees, the purchase record (admin API), the calls the
//! node received and the ledger rows.

mod common;

use std::sync::Once;

use common::money::{ledger, paid_config, paid_route, rows, Admin};
use common::peers::{peers_python, Peer};
use common::secrets::{token, ADMIN_TOKEN};
use common::wait::{eventually, states};
use common::{client, config, status_and_json, Proxy};
use serde_json::{json, Value};

/// The variable holding interlingua's key for the purchaser node (the agent's own node has
/// another).
const BUYER_ENV: &str = "INTERLINGUA_TEST_MASUMI_TOKEN";
const BUYER_KEY: &str = "buyer-key";
const SELLER_KEY: &str = "seller-key";
const SELLER_VKEY: &str = "seller_vkey_hex_0123";
const AGENT_ID: &str = "agent_policyid_plus_assetname_0000000000000000000000000000000000";
const PURCHASER: &str = "aabbccddeeff0011";

struct World {
    standin: Peer,
    agent: Peer,
    proxy: Proxy,
}

impl World {
    /// A world whose node behaves as `script` says (the stand-in's `/_config`).
    async fn start(payment: bool, script: Value) -> World {
        World::working(payment, script, 0.0).await
    }

    /// As [`World::start`], with jobs that take `work` seconds.
    async fn working(payment: bool, script: Value, work: f64) -> World {
        let w = tokio::task::spawn_blocking(move || world(payment, work))
            .await
            .unwrap();
        let resp = client()
            .post(w.standin("/_config"))
            .json(&script)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        w
    }

    fn standin(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.standin.port)
    }

    async fn standin_get(&self, path: &str) -> Value {
        client()
            .get(self.standin(path))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Every request the node received on `path` (below `/api/v1`), in order.
    async fn calls(&self, path: &str) -> Vec<Value> {
        let log = self.standin_get("/_log").await;
        log["requests"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["path"] == format!("/api/v1{path}"))
            .cloned()
            .collect()
    }
}

/// The stand-in, the masumi agent on it (its jobs taking `work` seconds), and interlingua with a
/// MIP-003 route over the agent; `payment`: whether the route names the stand-in as its payment
/// service.
fn world(payment: bool, work: f64) -> World {
    static ENV: Once = Once::new();
    ENV.call_once(|| std::env::set_var(BUYER_ENV, BUYER_KEY));
    let python = peers_python();
    let standin = Peer::start(
        &python,
        "payment_standin.py",
        &[],
        &[
            // The seller's payment is locked only by a purchase (or, without a payment
            // service, on the agent's first poll: an instant buyer elsewhere).
            (
                "STANDIN_LOCK_ON_POLL",
                if payment { "0" } else { "1" }.to_string(),
            ),
            ("STANDIN_API_KEY", SELLER_KEY.to_string()),
            ("STANDIN_PURCHASER_API_KEY", BUYER_KEY.to_string()),
        ],
    );
    let agent = Peer::start(
        &python,
        "masumi_agent.py",
        &[],
        &[
            (
                "PAYMENT_SERVICE_URL",
                format!("http://127.0.0.1:{}/api/v1", standin.port),
            ),
            ("PAYMENT_API_KEY", SELLER_KEY.to_string()),
            ("SELLER_VKEY", SELLER_VKEY.to_string()),
            ("AGENT_IDENTIFIER", AGENT_ID.to_string()),
            ("NETWORK", "Preprod".to_string()),
            ("PEER_PAYMENT_POLL_SECONDS", "0.2".to_string()),
            ("AGENT_WORK_SECONDS", work.to_string()),
        ],
    );
    let upstream = format!(
        "[[upstreams]]\nname = \"masumi\"\naddress = \"127.0.0.1:{}\"\nread_timeout = \"10s\"\n",
        agent.port
    );
    let pay = if payment {
        format!(
            "payment = {{ masumi = {{ url = \"http://127.0.0.1:{}/api/v1\", token_env = \"{BUYER_ENV}\", network = \"Preprod\" }} }}",
            standin.port
        )
    } else {
        String::new()
    };
    let text = if payment {
        paid_config(&format!(
            "{upstream}{}",
            paid_route("masumi", "/", "masumi", "mip003", "mip003", &pay)
        ))
    } else {
        config(
            "",
            &format!(
                "{upstream}\n[[routes]]\nname = \"masumi\"\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"masumi\"\nfront = \"mip003\"\nback = \"mip003\"\n"
            ),
        )
    };
    let proxy = Proxy::start(&text);
    World {
        standin,
        agent,
        proxy,
    }
}

/// Starts a job for `subject` through interlingua; its start_job answer.
async fn start_job(w: &World, subject: &str, input: Value) -> Value {
    let resp = client()
        .post(w.proxy.url("/start_job"))
        .bearer_auth(token(subject))
        .json(&json!({"identifier_from_purchaser": PURCHASER, "input_data": input}))
        .send()
        .await
        .unwrap();
    let (status, body) = status_and_json(resp).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The job's statuses as the client sees them, until one of `until`; and the last answer.
async fn statuses(w: &World, subject: &str, job: &str, until: &[&str]) -> (Vec<String>, Value) {
    let url = w.proxy.url(&format!("/status?job_id={job}"));
    let bearer = token(subject);
    states("the job's status", until, || {
        let (url, bearer) = (url.clone(), bearer.clone());
        async move {
            let resp = client().get(url).bearer_auth(bearer).send().await.unwrap();
            let (status, body) = status_and_json(resp).await;
            assert_eq!(status, 200, "{body}");
            (body["status"].as_str().unwrap_or("").to_string(), body)
        }
    })
    .await
}

/// The task and its purchases as the admin API shows them; checks that `/purchases` agrees.
/// [`stored`] once the task's first purchase record is in `state`: the record is written when the
/// payment node's answer has come back, a moment after the stand-in saw the call.
async fn stored_in(w: &World, task: &str, state: &str) -> (Value, Vec<Value>) {
    eventually(&format!("the purchase to be {state}"), || async {
        let (t, records) = stored(w, task).await;
        if records.first().is_some_and(|r| r["state"] == state) {
            Ok((t, records))
        } else {
            Err(Value::Array(records))
        }
    })
    .await
}

async fn stored(w: &World, task: &str) -> (Value, Vec<Value>) {
    let http = client();
    let get = |path: String| {
        let http = http.clone();
        async move {
            let resp = http
                .get(path)
                .bearer_auth(ADMIN_TOKEN)
                .send()
                .await
                .unwrap();
            let (status, body) = status_and_json(resp).await;
            assert_eq!(status, 200, "{body}");
            body
        }
    };
    let whole = get(w.proxy.admin_url(&format!("/tasks/{task}"))).await;
    let only = get(w.proxy.admin_url(&format!("/tasks/{task}/purchases"))).await;
    assert_eq!(whole["purchases"], only["purchases"]);
    (
        whole["task"].clone(),
        whole["purchases"].as_array().unwrap().clone(),
    )
}

/// What interlingua must send to buy the job the agent's start_job answer describes: the
/// agent's own values, renamed only where the node's schema says.
fn expected_purchase(job: &Value, input: &Value) -> Value {
    let ms = |k: &str| Value::String(job[k].as_i64().unwrap().to_string());
    json!({
        "blockchainIdentifier": job["blockchainIdentifier"],
        "network": "Preprod",
        "sellerVkey": SELLER_VKEY,
        "agentIdentifier": AGENT_ID,
        "identifierFromPurchaser": PURCHASER,
        "inputHash": masumi::mip004::input_hash(PURCHASER, input).unwrap(),
        "payByTime": ms("payByTime"),
        "submitResultTime": ms("submitResultTime"),
        "unlockTime": ms("unlockTime"),
        "externalDisputeUnlockTime": ms("externalDisputeUnlockTime"),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_job_waits_for_the_purchase_then_completes_and_is_charged() {
    let w = World::start(true, json!({})).await;
    let admin = Admin::new(&w.proxy);
    admin.grant("alice", 10).await;
    let input = json!({"text": "hello world"});
    let job = start_job(&w, "alice", input.clone()).await;
    // The agent's own payment request, as it sent it.
    assert_eq!(job["sellerVKey"], SELLER_VKEY);
    assert_eq!(job["agentIdentifier"], AGENT_ID);
    let bid = job["blockchainIdentifier"].as_str().unwrap().to_string();
    assert!(bid.starts_with("mock_"), "{job}");
    let id = job["job_id"].as_str().unwrap();

    let (seen, last) = statuses(&w, "alice", id, &["completed", "failed"]).await;
    assert_eq!(
        seen.first().map(String::as_str),
        Some("awaiting_payment"),
        "{seen:?}"
    );
    assert_eq!(
        seen.last().map(String::as_str),
        Some("completed"),
        "{seen:?} {last}"
    );
    assert_eq!(last["result"], "HELLO WORLD");

    // One purchase, with exactly the agent's fields, under interlingua's own key.
    let bought = w.calls("/purchase").await;
    assert_eq!(bought.len(), 1, "{bought:?}");
    assert_eq!(bought[0]["token"], BUYER_KEY);
    assert_eq!(bought[0]["body"], expected_purchase(&job, &input));
    let (task, purchases) = stored(&w, id).await;
    assert_eq!(task["status"], "completed");
    assert_eq!(purchases.len(), 1);
    assert_eq!(purchases[0]["rail"], "masumi");
    assert_eq!(purchases[0]["reference"], bid.as_str());
    assert_eq!(purchases[0]["state"], "locked");
    assert_eq!(purchases[0]["service"]["onChainState"], "FundsLocked");
    assert_eq!(purchases[0]["request"], expected_purchase(&job, &input));

    admin.charged("alice", 10, 1).await;
    assert_eq!(
        ledger(&admin, "alice").await,
        rows(&[("grant", 10), ("hold", 1), ("capture", 1), ("release", 0)])
    );
    // No refund was asked for a job delivered.
    assert!(w.calls("/purchase/request-refund").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_purchase_fails_the_task_and_releases_the_hold() {
    let w = World::start(true, json!({"purchase_mode": "refuse"})).await;
    let admin = Admin::new(&w.proxy);
    admin.grant("bob", 10).await;
    let job = start_job(&w, "bob", json!({"text": "hello"})).await;
    let id = job["job_id"].as_str().unwrap();
    let (seen, _) = statuses(&w, "bob", id, &["completed", "failed"]).await;
    assert_eq!(seen, ["failed"]);

    let (task, purchases) = stored(&w, id).await;
    assert_eq!(task["status"], "failed");
    assert_eq!(task["reason"], "payment");
    assert_eq!(
        task["message"],
        "the payment service refused the purchase: Not enough funds in wallets"
    );
    assert_eq!(purchases.len(), 1);
    assert_eq!(purchases[0]["state"], "refused");
    assert_eq!(purchases[0]["calls"][0]["status"], 400);
    admin.charged("bob", 10, 0).await;
    assert_eq!(
        ledger(&admin, "bob").await,
        rows(&[("grant", 10), ("hold", 1), ("release", 1)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purchase_never_locked_by_pay_by_time_fails_the_task_and_releases_the_hold() {
    // The agent asks to be paid within 1.5 s; the node never locks, and gives up 200 ms later.
    let w = World::start(
        true,
        json!({"purchase_mode": "never", "pay_by_ms": 1500, "lock_grace_ms": 200}),
    )
    .await;
    let admin = Admin::new(&w.proxy);
    admin.grant("carol", 10).await;
    let job = start_job(&w, "carol", json!({"text": "hello"})).await;
    let id = job["job_id"].as_str().unwrap();
    let (seen, _) = statuses(&w, "carol", id, &["completed", "failed"]).await;
    assert_eq!(seen, ["awaiting_payment", "failed"]);

    let (task, purchases) = stored(&w, id).await;
    assert_eq!(task["reason"], "payment");
    let message = task["message"].as_str().unwrap();
    assert!(
        message.starts_with("the payment was not locked: Purchase request payByTime"),
        "{message}"
    );
    assert_eq!(purchases[0]["state"], "expired");
    assert_eq!(
        purchases[0]["service"]["onChainState"],
        "FundsOrDatumInvalid"
    );
    // The agent never started: its own node never saw the funds.
    let payments = w.standin_get("/_payments").await;
    let bid = job["blockchainIdentifier"].as_str().unwrap();
    assert_eq!(payments["payments"][bid]["onChainState"], Value::Null);
    admin.charged("carol", 10, 0).await;
    assert_eq!(
        ledger(&admin, "carol").await,
        rows(&[("grant", 10), ("hold", 1), ("release", 1)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_fails_after_payment_gets_a_refund_request() {
    // The node answers the first refund request 409 (its state changed meanwhile): interlingua
    // reads the purchase again and asks once more.
    let w = World::start(true, json!({"refund_conflicts": 1})).await;
    let admin = Admin::new(&w.proxy);
    admin.grant("dave", 10).await;
    let job = start_job(&w, "dave", json!({"text": "doomed", "mode": "fail"})).await;
    let id = job["job_id"].as_str().unwrap();
    let (seen, _) = statuses(&w, "dave", id, &["completed", "failed"]).await;
    assert_eq!(
        seen.first().map(String::as_str),
        Some("awaiting_payment"),
        "{seen:?}"
    );
    assert_eq!(seen.last().map(String::as_str), Some("failed"), "{seen:?}");

    let bid = job["blockchainIdentifier"].as_str().unwrap();
    let refunds = eventually("the refund request", || async {
        let calls = w.calls("/purchase/request-refund").await;
        if calls.len() == 2 {
            Ok(calls)
        } else {
            Err(format!("{calls:?}"))
        }
    })
    .await;
    for call in &refunds {
        assert_eq!(call["token"], BUYER_KEY);
        assert_eq!(
            call["body"],
            json!({"blockchainIdentifier": bid, "network": "Preprod"})
        );
    }
    let purchases = w.standin_get("/_purchases").await;
    assert_eq!(
        purchases["purchases"][bid]["NextAction"]["requestedAction"],
        "SetRefundRequestedRequested"
    );
    let (task, records) = stored_in(&w, id, "refund_requested").await;
    assert_eq!(task["status"], "failed");
    assert_eq!(
        records[0]["detail"],
        "the agent failed; a refund was requested"
    );
    let refund_statuses: Vec<&Value> = records[0]["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["call"] == "request_refund")
        .map(|c| &c["status"])
        .collect();
    assert_eq!(refund_statuses, [&json!(409), &json!(200)]);
    admin.charged("dave", 10, 0).await;
    assert_eq!(
        ledger(&admin, "dave").await,
        rows(&[("grant", 10), ("hold", 1), ("release", 1)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_does_not_deliver_by_submit_result_time_gets_a_refund_request() {
    // The agent must deliver within 3 s of start_job; its job takes a minute.
    let w = World::working(true, json!({"submit_result_ms": 3000}), 60.0).await;
    let admin = Admin::new(&w.proxy);
    admin.grant("erin", 10).await;
    let job = start_job(&w, "erin", json!({"text": "slow"})).await;
    let id = job["job_id"].as_str().unwrap();
    let (seen, _) = statuses(&w, "erin", id, &["completed", "failed"]).await;
    assert_eq!(seen, ["awaiting_payment", "running", "failed"]);
    let bid = job["blockchainIdentifier"].as_str().unwrap();
    let refunds = w.calls("/purchase/request-refund").await;
    assert_eq!(refunds.len(), 1, "{refunds:?}");
    assert_eq!(
        refunds[0]["body"],
        json!({"blockchainIdentifier": bid, "network": "Preprod"})
    );
    let (task, records) = stored_in(&w, id, "refund_requested").await;
    assert_eq!(task["reason"], "payment");
    assert_eq!(
        task["message"],
        "the agent did not deliver by submitResultTime; a refund was requested"
    );
    assert_eq!(records[0]["state"], "refund_requested");
    admin.charged("erin", 10, 0).await;
    assert_eq!(
        ledger(&admin, "erin").await,
        rows(&[("grant", 10), ("hold", 1), ("release", 1)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purchase_whose_answer_was_lost_is_offered_again_and_made_once() {
    // The node makes the purchase but its answer is lost: interlingua asks again, meets 409
    // ("Purchase exists"), and takes that purchase as made.
    let w = World::start(true, json!({"lost_purchase_answers": 1})).await;
    let admin = Admin::new(&w.proxy);
    admin.grant("frank", 10).await;
    let input = json!({"text": "again"});
    let job = start_job(&w, "frank", input.clone()).await;
    let id = job["job_id"].as_str().unwrap();
    let (seen, last) = statuses(&w, "frank", id, &["completed", "failed"]).await;
    assert_eq!(
        seen.last().map(String::as_str),
        Some("completed"),
        "{seen:?} {last}"
    );
    let bought = w.calls("/purchase").await;
    assert_eq!(bought.len(), 2, "{bought:?}");
    assert_eq!(bought[0]["body"], bought[1]["body"]);
    assert_eq!(bought[1]["body"], expected_purchase(&job, &input));
    let purchases = w.standin_get("/_purchases").await;
    assert_eq!(purchases["purchases"].as_object().unwrap().len(), 1);
    let (_, records) = stored(&w, id).await;
    assert_eq!(records[0]["state"], "locked");
    let statuses: Vec<&Value> = records[0]["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["call"] == "purchase")
        .map(|c| &c["status"])
        .collect();
    assert_eq!(statuses, [&json!(500), &json!(409)]);
    admin.charged("frank", 10, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_payment_service_a_mip003_front_shows_the_agents_own_payment_request() {
    let w = World::start(false, json!({})).await;
    let resp = client()
        .post(w.proxy.url("/start_job"))
        .json(&json!({"identifier_from_purchaser": PURCHASER, "input_data": {"text": "hi there"}}))
        .send()
        .await
        .unwrap();
    let (status, job) = status_and_json(resp).await;
    assert_eq!(status, 200, "{job}");
    let payments = w.standin_get("/_payments").await;
    let (bid, payment) = payments["payments"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    assert_eq!(job["blockchainIdentifier"], bid.as_str());
    assert_eq!(job["sellerVKey"], SELLER_VKEY);
    assert_eq!(job["agentIdentifier"], AGENT_ID);
    for k in [
        "payByTime",
        "submitResultTime",
        "unlockTime",
        "externalDisputeUnlockTime",
    ] {
        assert_eq!(
            job[k].as_i64().map(|t| t.to_string()),
            payment[k].as_str().map(str::to_string),
            "{k}"
        );
    }
    assert_eq!(job["input_hash"], payment["inputHash"]);
    // Nothing was bought.
    assert!(w.calls("/purchase").await.is_empty());
    // And the job runs as before, paid by someone else.
    let id = job["job_id"].as_str().unwrap();
    let (_, last) = statuses(&w, "nobody", id, &["completed"]).await;
    assert_eq!(last["result"], "HI THERE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_job_without_a_purchaser_id_is_answered_422_as_masumi_answers_it() {
    let w = World::start(false, json!({})).await;
    let agent = format!("http://127.0.0.1:{}", w.agent.port);
    for body in [
        json!({"input_data": {"text": "hi"}}),
        json!({"identifier_from_purchaser": 7, "input_data": {"text": "hi"}}),
    ] {
        let ours = client()
            .post(w.proxy.url("/start_job"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let (status, ours) = status_and_json(ours).await;
        let theirs = client()
            .post(format!("{agent}/start_job"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let (their_status, theirs) = status_and_json(theirs).await;
        assert_eq!((status, &ours), (their_status, &theirs), "{body}");
        assert_eq!(status, 422);
    }
    // The first, spelled out.
    let resp = client()
        .post(w.proxy.url("/start_job"))
        .json(&json!({"input_data": {"text": "hi"}}))
        .send()
        .await
        .unwrap();
    let (_, body) = status_and_json(resp).await;
    assert_eq!(
        body,
        json!({"detail": [{"type": "missing", "loc": ["body", "identifier_from_purchaser"], "msg": "Field required", "input": {"input_data": {"text": "hi"}}}]})
    );
}
