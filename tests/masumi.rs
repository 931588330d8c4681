//! Against the real thing: the official Masumi Python package (`masumi` 1.2.0, pinned in
//! `tests/peers/requirements.txt`) runs as the upstream MIP-003 agent, with a local stand-in for
//! the three payment-service endpoints it calls, and is reached through interlingua as a
//! Nevermined endpoint, the whole lifecycle.
//!
//! The Python peers live in a virtualenv (see `tests/common/peers.rs`).

mod common;

use common::peers::{masumi_agent, peers_python, Peer};
use common::wait::eventually;
use common::{client, config, Proxy};
use serde_json::{json, Value};

const DID: &str = "did:nv:5392e8cdc5addec2b7384072fda166d42a5d4ab96ae6d311f516b6b324f24cec";

struct World {
    _standin: Peer,
    _agent: Peer,
    standin_port: u16,
    proxy: Proxy,
}

fn world() -> World {
    let python = peers_python();
    let standin = Peer::start(&python, "payment_standin.py", &[], &[]);
    let agent = masumi_agent(&python, standin.port);
    let proxy = Proxy::start(&config(
        "",
        &format!(
            "[[upstreams]]\nname = \"masumi\"\naddress = \"127.0.0.1:{}\"\nread_timeout = \"10s\"\n\n\
             [[routes]]\nname = \"masumi-as-nevermined\"\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"masumi\"\n\
             front = \"nevermined\"\nback = \"mip003\"\n",
            agent.port
        ),
    ));
    World {
        standin_port: standin.port,
        _standin: standin,
        _agent: agent,
        proxy,
    }
}

async fn poll(
    http: &reqwest::Client,
    url: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    eventually(what, || async {
        let resp = http.get(url).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let body: Value = resp.json().await.unwrap();
        if done(&body) {
            Ok(body)
        } else {
            Err(body)
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_masumi_package_as_a_nevermined_endpoint_through_its_whole_lifecycle() {
    let w = tokio::task::spawn_blocking(world).await.unwrap();
    let http = client();
    let tasks = w.proxy.url(&format!("/api/v1/agents/{DID}/tasks"));

    // A job that asks for input once.
    let resp = http
        .post(&tasks)
        .json(&json!({"input_query": "hello world", "name": "masumi", "input_additional": {"mode": "input"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let created: Value = resp.json().await.unwrap();
    let task_id = created["task"]["task_id"].as_str().unwrap().to_string();
    let path = format!("{tasks}/{task_id}");
    let waiting = poll(&http, &path, "Not_Ready", |b| {
        b["task"]["task_status"] == "Not_Ready"
    })
    .await;
    let schema = &waiting["task"]["output_additional"]["input_schema"];
    assert_eq!(schema["input_data"][0]["id"], "more", "{waiting}");
    let step_id = waiting["steps"].as_array().unwrap().last().unwrap()["step_id"]
        .as_str()
        .unwrap()
        .to_string();
    let resp = http
        .put(format!("{path}/step/{step_id}"))
        .json(&json!({"step_status": "Pending", "input_additional": {"more": "from masumi"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201, "{}", resp.text().await.unwrap());
    let done = poll(&http, &path, "Completed", |b| {
        b["task"]["task_status"] == "Completed"
    })
    .await;
    assert_eq!(done["task"]["output"], "HELLO WORLD from masumi");

    // The input hash interlingua computes (MIP-004) is the one masumi sent to the payment node.
    let log: Value = http
        .get(format!("http://127.0.0.1:{}/_log", w.standin_port))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let payment = log["requests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/payment/") || p.ends_with("/payment"))
        })
        .expect("masumi asked the payment node for a payment")
        .clone();
    let purchaser = payment["body"]["identifierFromPurchaser"].as_str().unwrap();
    let ours =
        masumi::mip004::input_hash(purchaser, &json!({"mode": "input", "text": "hello world"}))
            .unwrap();
    assert_eq!(payment["body"]["inputHash"], ours.as_str());

    // And a job that fails.
    let created: Value = http
        .post(&tasks)
        .json(&json!({"input_query": "doomed", "input_additional": {"mode": "fail"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let path = format!("{tasks}/{}", created["task"]["task_id"].as_str().unwrap());
    let failed = poll(&http, &path, "Failed", |b| {
        b["task"]["task_status"] == "Failed"
    })
    .await;
    assert_eq!(failed["task"]["output"], "");
}
