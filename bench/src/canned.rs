//! The canned upstream: one fast HTTP/1.1 server that answers as a MIP-003 agent, as a Nevermined
//! agent and as an echo server at once, with fixed bodies (fresh ids where a create needs them).
//!
//! It has no state: a job's fate is written into its id. A create whose body contains
//! `keep-running` gets an id starting `run-` (Nevermined: `task-run-`), which every later poll
//! reports as running, so the proxy keeps polling it (the get_task hot path); any other create
//! gets a `done-` id, reported completed on the first poll, so the proxy's watcher settles it
//! (capture and release) and stops following it. Timestamps are fixed, so a repeated poll
//! changes nothing and the proxy writes nothing for it.
//!
//! | request | answer |
//! |---|---|
//! | `POST /start_job` | 200, MIP-003 job (`id`, `job_id`, payment metadata) |
//! | `GET /status?job_id=ID` | 200, `running` or `completed` (result `DONE`) |
//! | `GET /availability`, `GET /input_schema` | 200, MIP-003 |
//! | `POST /api/v1/agents/{did}/tasks` | 201, Nevermined task (`Pending`) and its first step |
//! | `GET /api/v1/agents/{did}/tasks/{id}` | 200, Nevermined task: `In_Progress`, or `Completed` for `done` ids; `task-static` is the passthrough payload |
//! | `POST /echo` | 200, the request body |

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use hyper::{Method, StatusCode};

use crate::serve::{json, Answer, Service};

/// The marker a create's body carries to get a task that never finishes.
pub const KEEP_RUNNING: &str = "keep-running";
/// The id of the task the passthrough contenders fetch (`GET /api/v1/agents/{did}/tasks/task-static`).
pub const STATIC_TASK: &str = "task-static";

const TIME: &str = "2025-01-01T00:00:00.000Z";

/// A Nevermined step; `@TID@` is the task id, `@SID@` the step id.
fn nv_step(name: &str, status: &str, order: u32, last: bool, pred: &str, output: &str) -> String {
    let cost = u32::from(status == "Completed");
    format!(
        r#"{{"step_id":"@SID@","task_id":"@TID@","did":"@DID@","name":"{name}","step_status":"{status}","order":{order},"is_last":{last},"is_waiting":false,"retries":0,"predecessor":"{pred}","input_query":"","input_additional":{{}},"input_artifacts":[],"output":"{output}","output_additional":{{}},"output_artifacts":[],"cost":{cost},"createdAt":"{TIME}","updatedAt":"{TIME}"}}"#
    )
}

/// A Nevermined task answer (`{"task", "steps", "logs"}`) for a status, with placeholders.
fn nv_task(status: &str, output: &str, steps: &[String]) -> String {
    let cost = steps
        .iter()
        .filter(|s| s.contains(r#""step_status":"Completed""#))
        .count();
    let steps: Vec<String> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            s.replace("@SID@", &format!("step-@BID@-{i}"))
                .replace("@PRED@", &format!("step-@BID@-{}", i.saturating_sub(1)))
        })
        .collect();
    format!(
        r#"{{"task":{{"task_id":"@TID@","did":"@DID@","user":"0x0000000000000000000000000000000000000001","task_status":"{status}","name":"bench","input_query":"a question for the agent","input_additional":{{}},"input_artifacts":[],"output":"{output}","output_additional":{{}},"output_artifacts":[],"cost":{cost},"createdAt":"{TIME}","updatedAt":"{TIME}","owner":"bench"}},"steps":[{}],"logs":[]}}"#,
        steps.join(",")
    )
}

/// The fixed bodies, with placeholders filled per request.
struct Bodies {
    nv_pending: String,
    nv_running: String,
    nv_done: String,
    /// The running task under the id `task-static`, ready to send.
    nv_static: Bytes,
}

impl Bodies {
    fn new() -> Bodies {
        let init_pending = nv_step("init", "Pending", 1, false, "", "");
        let init_done = nv_step("init", "Completed", 1, false, "", "");
        let work_running = nv_step("work", "In_Progress", 2, false, "@PRED@", "");
        let work_done = nv_step("work", "Completed", 2, true, "@PRED@", "DONE");
        let nv_running = nv_task("In_Progress", "", &[init_done.clone(), work_running]);
        let nv_static = Bytes::from(fill(&nv_running, STATIC_TASK, "did:nv:bench"));
        Bodies {
            nv_pending: nv_task("Pending", "", &[init_pending]),
            nv_done: nv_task("Completed", "DONE", &[init_done, work_done]),
            nv_running,
            nv_static,
        }
    }
}

/// Fills a Nevermined template for task `task_id` (with its `task-` prefix) of agent `did`.
fn fill(template: &str, task_id: &str, did: &str) -> String {
    let bare = task_id.strip_prefix("task-").unwrap_or(task_id);
    template
        .replace("@TID@", task_id)
        .replace("@BID@", bare)
        .replace("@DID@", did)
}

struct Canned {
    bodies: Bodies,
    next: AtomicU64,
    /// Distinguishes this process's ids from an earlier one's.
    tag: String,
}

impl Canned {
    fn new_id(&self, body: &[u8]) -> String {
        let kind = if contains(body, KEEP_RUNNING.as_bytes()) {
            "run"
        } else {
            "done"
        };
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{kind}-{}-{n}", self.tag)
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn answer(c: &Canned, method: &Method, path: &str, query: Option<&str>, body: Bytes) -> Answer {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match (method, segs.as_slice()) {
        (&Method::POST, ["start_job"]) => {
            let id = c.new_id(&body);
            json(
                StatusCode::OK,
                format!(
                    r#"{{"id":"{id}","job_id":"{id}","status":"pending","blockchainIdentifier":"bench_{id}","payByTime":1767225600000,"submitResultTime":1767312000000,"unlockTime":1767333600000,"externalDisputeUnlockTime":1767355200000,"agentIdentifier":"bench-agent","sellerVKey":"bench_vkey","identifierFromPurchaser":"bench","input_hash":"0000000000000000000000000000000000000000000000000000000000000000"}}"#
                ),
            )
        }
        (&Method::GET, ["status"]) => match query_param(query, "job_id") {
            Some(id) if id.starts_with("run-") => json(
                StatusCode::OK,
                format!(
                    r#"{{"id":"st-{id}","job_id":"{id}","status":"running","input_schema":null,"result":null}}"#
                ),
            ),
            Some(id) => json(
                StatusCode::OK,
                format!(
                    r#"{{"id":"st-{id}","job_id":"{id}","status":"completed","input_schema":null,"result":"DONE"}}"#
                ),
            ),
            None => json(
                StatusCode::UNPROCESSABLE_ENTITY,
                r#"{"detail":"job_id is required"}"#,
            ),
        },
        (&Method::GET, ["availability"]) => json(
            StatusCode::OK,
            r#"{"status":"available","type":"masumi-agent","message":"bench agent"}"#,
        ),
        (&Method::GET, ["input_schema"]) => json(
            StatusCode::OK,
            r#"{"input_data":[{"id":"text","type":"text","name":"Text"}]}"#,
        ),
        (&Method::POST, ["api", "v1", "agents", did, "tasks"]) => {
            let id = format!("task-{}", c.new_id(&body));
            json(StatusCode::CREATED, fill(&c.bodies.nv_pending, &id, did))
        }
        (&Method::GET, ["api", "v1", "agents", did, "tasks", id]) => {
            if *id == STATIC_TASK {
                json(StatusCode::OK, c.bodies.nv_static.clone())
            } else if id.starts_with("task-done-") {
                json(StatusCode::OK, fill(&c.bodies.nv_done, id, did))
            } else {
                json(StatusCode::OK, fill(&c.bodies.nv_running, id, did))
            }
        }
        (&Method::POST, ["echo"]) => json(StatusCode::OK, body),
        _ => json(StatusCode::NOT_FOUND, r#"{"detail":"Not Found"}"#),
    }
}

impl Service for Canned {
    fn answer(&self, method: &Method, path: &str, query: Option<&str>, body: Bytes) -> Answer {
        answer(self, method, path, query, body)
    }
}

/// Runs the canned upstream on `threads` worker threads, printing `upstream ready: ADDR` once
/// listening.
pub fn main(listen: SocketAddr, threads: usize) -> std::io::Result<()> {
    let canned = Canned {
        bodies: Bodies::new(),
        next: AtomicU64::new(0),
        tag: format!("{:x}", chrono::Utc::now().timestamp_millis()),
    };
    crate::serve::main("upstream", listen, threads, canned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::body_of;

    fn canned() -> Canned {
        Canned {
            bodies: Bodies::new(),
            next: AtomicU64::new(0),
            tag: "t".to_string(),
        }
    }

    #[test]
    fn every_nevermined_template_is_json_with_consistent_ids() {
        let c = canned();
        for (id, status) in [
            ("task-run-t-1", "In_Progress"),
            ("task-done-t-2", "Completed"),
            (STATIC_TASK, "In_Progress"),
        ] {
            let r = answer(
                &c,
                &Method::GET,
                &format!("/api/v1/agents/did:nv:x/tasks/{id}"),
                None,
                Bytes::new(),
            );
            let v = body_of(r);
            assert_eq!(v["task"]["task_id"], id);
            assert_eq!(v["task"]["task_status"], status);
            let steps = v["steps"].as_array().unwrap();
            assert_eq!(steps[1]["predecessor"], steps[0]["step_id"]);
            assert!(steps[0]["step_id"].as_str().unwrap().starts_with("step-"));
        }
        let created = answer(
            &c,
            &Method::POST,
            "/api/v1/agents/did:nv:x/tasks",
            None,
            Bytes::from_static(b"{}"),
        );
        assert_eq!(created.status(), StatusCode::CREATED);
        assert_eq!(body_of(created)["task"]["task_status"], "Pending");
    }

    #[test]
    fn a_job_s_fate_is_in_its_id() {
        let c = canned();
        let run = body_of(answer(
            &c,
            &Method::POST,
            "/start_job",
            None,
            Bytes::from_static(b"{\"text\":\"keep-running\"}"),
        ));
        let done = body_of(answer(
            &c,
            &Method::POST,
            "/start_job",
            None,
            Bytes::from_static(b"{}"),
        ));
        let status = |id: &serde_json::Value| {
            let q = format!("job_id={}", id.as_str().unwrap());
            body_of(answer(&c, &Method::GET, "/status", Some(&q), Bytes::new()))["status"].clone()
        };
        assert_eq!(status(&run["id"]), "running");
        assert_eq!(status(&done["id"]), "completed");
        assert_ne!(run["id"], done["id"]);
    }
}
