//! Against the real thing: Nevermined's own Python client (`payments-py` 0.7.3, pinned in
//! `tests/peers/requirements.txt`) makes every call of its `AIQueryApi` through interlingua's
//! `nevermined` front, over the real Masumi agent (`masumi` 1.2.0) behind a paid route: a task
//! that asks for input once, answered through the step update, and the builder's searches and
//! lists on the way. What the client returns and what the ledger says are asserted exactly.

mod common;

use common::money::{paid_config, paid_route, Admin};
use common::peers::{masumi_agent, peers_python, run_json, Peer};
use common::secrets::token;
use common::{Proxy, DEADLINE};
use serde_json::{json, Value};

const DID: &str = "did:nv:5392e8cdc5addec2b7384072fda166d42a5d4ab96ae6d311f516b6b324f24cec";

struct World {
    _standin: Peer,
    _agent: Peer,
    proxy: Proxy,
}

/// The masumi agent and its payment-service stand-in, and a proxy whose route `/nvm` is a paid
/// Nevermined front over it (a task holds 1 credit, each completed step costs 1).
fn world() -> World {
    let python = peers_python();
    let standin = Peer::start(&python, "payment_standin.py", &[], &[]);
    let agent = masumi_agent(&python, standin.port);
    let rest = format!(
        "[[upstreams]]\nname = \"masumi\"\naddress = \"127.0.0.1:{}\"\nread_timeout = \"10s\"\n{}",
        agent.port,
        paid_route("nvm", "/nvm", "masumi", "nevermined", "mip003", "")
    );
    let proxy = Proxy::start(&paid_config(&rest));
    World {
        _standin: standin,
        _agent: agent,
        proxy,
    }
}

/// Runs the payments-py driver against the route; its report.
async fn drive(url: String, key: String) -> Value {
    tokio::task::spawn_blocking(move || {
        let args = vec![
            "--url".to_string(),
            url,
            "--key".to_string(),
            key,
            "--did".to_string(),
            DID.to_string(),
        ];
        run_json(&peers_python(), "nevermined_client.py", &args, DEADLINE * 3)
    })
    .await
    .expect("the driver's thread")
}

/// `v` without its timestamps (`createdAt`, `updatedAt`), which must be there; objects and
/// arrays all the way down.
fn untimed(v: &Value) -> Value {
    match v {
        Value::Object(o) => {
            let mut out = serde_json::Map::new();
            for (k, x) in o {
                if k == "createdAt" || k == "updatedAt" {
                    assert!(x.is_string(), "{k} is a timestamp: {v}");
                } else {
                    out.insert(k.clone(), untimed(x));
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(untimed).collect()),
        other => other.clone(),
    }
}

/// The ids of a list of steps.
fn ids(steps: &Value) -> Vec<&str> {
    steps
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s["step_id"].as_str().expect("a step id"))
        .collect()
}

/// What masumi's agent asks for when it wants more input.
fn more_schema() -> Value {
    json!({"input_data": [{"id": "more", "type": "text", "name": "More",
                           "data": {"description": "Text appended to the result"}}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_payments_py_query_call_works_through_interlingua_over_a_masumi_agent() {
    let w = tokio::task::spawn_blocking(world).await.unwrap();
    let admin = Admin::new(&w.proxy);
    let sub = "0x1B06CFB22F0832fb92554152dbb5F9c9756e937d";
    admin.grant(sub, 10).await;
    let r = drive(w.proxy.url("/nvm"), token(sub)).await;
    let (task_id, waiting_id) = (
        r["task_id"].as_str().unwrap(),
        r["step_id"].as_str().unwrap(),
    );
    let question = "The agent needs more input: More";

    // S1 (after T0): 201, the task and its first step.
    let created = &r["create_task"];
    assert_eq!(created["success"], true, "{created}");
    let task = json!({
        "task_id": task_id, "did": DID, "user": sub, "task_status": "Pending", "name": "masumi",
        "input_query": "hello world", "input_additional": {"mode": "input"}, "input_artifacts": [],
        "output": "", "output_additional": {}, "output_artifacts": [], "cost": 0, "owner": "",
    });
    assert_eq!(untimed(&created["data"]["task"]), task);
    let init_id = created["data"]["steps"][0]["step_id"].as_str().unwrap();
    let init = json!({
        "step_id": init_id, "task_id": task_id, "did": DID, "name": "init", "step_status": "Pending",
        "order": 1, "is_last": false, "is_waiting": false, "retries": 0, "predecessor": "",
        "input_query": "hello world", "input_additional": {"mode": "input"}, "input_artifacts": [],
        "output": "", "output_additional": {}, "output_artifacts": [], "cost": 0,
    });
    assert_eq!(untimed(&created["data"]["steps"]), json!([init]));

    // S2, as FullTaskDto: the task waits for input (Not_Ready) on its second step.
    let waiting_step = json!({
        "step_id": waiting_id, "task_id": task_id, "did": DID, "name": "awaiting_input",
        "step_status": "Not_Ready", "order": 2, "is_last": false, "predecessor": init_id,
        "input_query": "", "input_additional": {}, "input_artifacts": [],
        "output": question, "output_additional": {"input_schema": more_schema()},
        "output_artifacts": [], "cost": 0,
    });
    let init_done = json!({
        "step_id": init_id, "task_id": task_id, "did": DID, "name": "init",
        "step_status": "Completed", "order": 1, "is_last": false, "predecessor": "",
        "input_query": "hello world", "input_additional": {"mode": "input"},
        "input_artifacts": [], "output": "", "output_additional": {}, "output_artifacts": [],
        "cost": 0,
    });
    let waiting_task = json!({
        "task_id": task_id, "did": DID, "user": sub, "task_status": "Not_Ready", "name": "masumi",
        "input_query": "hello world", "input_additional": {"mode": "input"}, "input_artifacts": [],
        "output": question, "output_additional": {"input_schema": more_schema()},
        "output_artifacts": [], "cost": 0, "owner": "",
    });
    assert_eq!(
        untimed(&r["get_task_with_steps_waiting"]),
        json!({"task": waiting_task, "steps": [init_done, waiting_step], "logs": []})
    );

    // B5, without and with ?status=.
    assert_eq!(
        r["get_steps_from_task"],
        json!({"steps": [init_done, waiting_step], "totalResults": 2})
    );
    assert_eq!(
        r["get_steps_from_task_not_ready"],
        json!({"steps": [waiting_step], "totalResults": 1})
    );
    // B3 by step id (get_step), and by task (search_step, the raw answer: with the hub's own
    // fields, each step with its did).
    assert_eq!(r["get_step"], waiting_step);
    let found = &r["search_step"];
    assert_eq!(
        (&found["totalResults"], &found["page"], &found["offset"]),
        (&json!(2), &json!(1), &json!(10))
    );
    assert_eq!(ids(&found["steps"]), [init_id, waiting_id]);
    assert_eq!(found["steps"][1]["is_waiting"], true);
    assert_eq!(found["steps"][1]["did"], DID);
    assert_eq!(
        found["steps"][1]["output_additional"]["input_schema"],
        more_schema()
    );
    // B4: the steps in a status, of these agents.
    assert_eq!(
        r["get_steps"],
        json!({"steps": [waiting_step], "totalResults": 1})
    );
    // B2 (the raw answer) and B1.
    let searched = &r["search_tasks"];
    assert_eq!(searched["status"], 200);
    assert_eq!(
        untimed(&searched["body"]),
        json!({"tasks": [waiting_task], "totalResults": 1, "page": 1, "offset": 10})
    );
    assert_eq!(
        untimed(&r["get_tasks_from_agents"]),
        json!({"tasks": [waiting_task], "totalResults": 1})
    );

    // B6 is refused, in Nevermined's error shape.
    let refused = &r["create_steps"];
    assert_eq!(refused["success"], false);
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.contains("'statusCode': 403")
            && error.contains("'error': 'Forbidden'")
            && error.contains("Steps are created by the agent behind this route"),
        "{error}"
    );

    // B7 carries the input to the waiting step; the task runs on to its end.
    let answered = &r["update_step"];
    assert_eq!(answered["success"], true, "{answered}");
    assert_eq!(
        (
            &answered["data"]["step_id"],
            &answered["data"]["input_query"],
            &answered["data"]["input_additional"],
        ),
        (
            &json!(waiting_id),
            &json!("from payments-py"),
            &json!({"more": "from payments-py"})
        )
    );
    let done = &r["get_task_with_steps_done"];
    assert_eq!(done["task"]["task_status"], "Completed");
    assert_eq!(done["task"]["output"], "HELLO WORLD from payments-py");
    assert_eq!(done["task"]["cost"], 1);
    let statuses: Vec<(&Value, &Value, &Value)> = done["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (&s["name"], &s["step_status"], &s["cost"]))
        .collect();
    assert_eq!(
        statuses,
        [
            (&json!("init"), &json!("Completed"), &json!(0)),
            (&json!("awaiting_input"), &json!("Completed"), &json!(0)),
            (&json!("running"), &json!("Completed"), &json!(1)),
        ]
    );
    assert_eq!(
        done["steps"][1]["input_additional"],
        json!({"more": "from payments-py"})
    );
    assert_eq!(r["get_steps_from_task_completed"]["steps"], done["steps"]);
    assert_eq!(r["get_steps_from_task_completed"]["totalResults"], 3);

    // An unknown task: payments-py raises with the answer, a Nevermined 404.
    assert_eq!(
        r["get_unknown_task"],
        json!({"status": 404, "error": {"statusCode": 404, "error": "Not Found",
               "message": "task `00000000-0000-4000-8000-000000000000` not found"}})
    );

    // B2 by task id: that task, or none.
    let http = common::client();
    for (id, total) in [
        (task_id, 1),
        ("task-00000000-0000-4000-8000-000000000000", 0),
    ] {
        let resp = http
            .post(w.proxy.url("/nvm/api/v1/agents/search/tasks"))
            .bearer_auth(token(sub))
            .json(&json!({"task_id": id}))
            .send()
            .await
            .unwrap();
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["totalResults"], total, "{body}");
    }

    // Another subject finds none of it: step searches and lists are the caller's own.
    let other = token("0xsomeone-else");
    let resp = http
        .post(w.proxy.url("/nvm/api/v1/agents/search/steps"))
        .bearer_auth(&other)
        .json(&json!({"step_id": waiting_id}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body,
        json!({"steps": [], "totalResults": 0, "page": 1, "offset": 10})
    );
    let resp = http
        .get(w.proxy.url(&format!(
            "/nvm/api/v1/agents/{DID}/tasks/{task_id}/steps?status=Completed"
        )))
        .bearer_auth(&other)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);

    // The ledger: the task held 1 credit, its one step of work was charged 1, the rest of the
    // hold went back; nothing else (T0, searches, lists, the refused call) cost anything.
    admin.charged(sub, 10, 1).await;
    let rows: Vec<(String, i64, String)> = admin
        .history(sub)
        .await
        .iter()
        .rev()
        .map(|row| {
            (
                row["kind"].as_str().unwrap().to_string(),
                row["amount"].as_i64().unwrap(),
                row["task_id"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let ours = task_id.strip_prefix("task-").unwrap().to_string();
    assert_eq!(
        rows,
        [
            ("grant".to_string(), 10, String::new()),
            ("hold".to_string(), 1, ours.clone()),
            ("capture".to_string(), 1, ours.clone()),
            ("release".to_string(), 0, ours),
        ]
    );
}

/// T0 hands back the caller's own token, verified, and the route's address; without a token it
/// is refused like every other call of the route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_token_is_the_callers_own_bearer_and_needs_it() {
    let w = tokio::task::spawn_blocking(world).await.unwrap();
    let http = common::client();
    let url = w
        .proxy
        .url(&format!("/nvm/api/v1/payments/service/token/{DID}"));
    let bearer = token("0xabc");
    let resp = http.get(&url).bearer_auth(&bearer).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body,
        json!({"token": {"accessToken": bearer, "neverminedProxyUri": w.proxy.url("/nvm")}})
    );
    let resp = http.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["statusCode"], 401);
}
