//! `interlingua demo` as a newcomer runs it: the shipped config (on free ports here), no secrets
//! set. What it prints must be what happens: the token and the admin token it made up work, the
//! console's URL opens with the admin token, and tasks cost what the text says (a MIP-003 job
//! one step, a Nevermined task two).

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Stdio};
use std::time::Instant;

use common::process::{interlingua, lines};
use common::wait::eventually;
use common::{client, DEADLINE};
use serde_json::{json, Value};

/// A port nobody listens on now: bound, read, and let go.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The shipped config with its listeners and sample agents moved to free ports, its data in
/// `data`, its mappings this repository's: (the text, the proxy's address, the admin's).
fn shipped_on_free_ports(data: &std::path::Path) -> (String, SocketAddr, SocketAddr) {
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/config/interlingua.toml");
    let mut text = std::fs::read_to_string(shipped).expect("the shipped config");
    let mut moved = Vec::new();
    for fixed in ["8080", "9901", "9100", "9101", "9102"] {
        let from = format!("\"127.0.0.1:{fixed}\"");
        assert!(text.contains(&from), "the shipped config has {from}");
        let to: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        text = text.replace(&from, &format!("\"{to}\""));
        moved.push(to);
    }
    text = text
        .replace(
            "data_dir = \"./data\"",
            &format!("data_dir = \"{}\"", data.display()),
        )
        .replace(
            "mappings_dir = \"./mappings\"",
            &format!(
                "mappings_dir = \"{}\"",
                concat!(env!("CARGO_MANIFEST_DIR"), "/mappings")
            ),
        );
    (text, moved[0], moved[1])
}

/// The running demo, killed if the test ends before it stops it.
struct Demo(Child);

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The demo's printed text, up to its last line.
fn printed(child: &mut Child) -> String {
    let out = lines(child.stdout.take().expect("the demo's stdout"));
    let start = Instant::now();
    let mut text = String::new();
    loop {
        let left = DEADLINE.saturating_sub(start.elapsed());
        match out.recv_timeout(left) {
            Ok(line) => {
                text.push_str(&line);
                text.push('\n');
                if line == "Stop with Ctrl-C." {
                    return text;
                }
            }
            Err(e) => panic!("the demo stopped printing ({e}):\n{text}"),
        }
    }
}

/// The value of `export NAME=…` in `text`.
fn exported(text: &str, name: &str) -> String {
    let prefix = format!("export {name}=");
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` in:\n{text}"))
        .to_string()
}

/// The demo subject's balance, through the admin API with `admin_token`.
async fn balance(admin: SocketAddr, admin_token: &str) -> Value {
    let resp = client()
        .get(format!(
            "http://{admin}/credits/balance?plan=demo&subject=demo-user"
        ))
        .bearer_auth(admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

/// Polls `url` with `token` until the status at `pointer` in its answer is `done`.
async fn until_done(url: &str, token: &str, pointer: &str, done: &str) {
    eventually(&format!("{url} to be {done}"), || async {
        let v: Value = client()
            .get(url)
            .bearer_auth(token)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        if v.pointer(pointer) == Some(&json!(done)) {
            Ok(())
        } else {
            Err(v.to_string())
        }
    })
    .await;
}

/// Waits until nothing is held; the balance then.
async fn settled(admin: SocketAddr, admin_token: &str) -> Value {
    eventually("the demo's tasks to settle", || async {
        let b = balance(admin, admin_token).await;
        if b["held"] == 0 {
            Ok(b)
        } else {
            Err(b)
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_prints_a_console_to_log_in_to_and_what_tasks_cost() {
    let dir = tempfile::tempdir().unwrap();
    let (text, proxy, admin) = shipped_on_free_ports(&dir.path().join("data"));
    let file = dir.path().join("interlingua.toml");
    std::fs::File::create(&file)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .unwrap();
    let mut demo = Demo(
        interlingua()
            .env_remove("INTERLINGUA_DEV_SECRET")
            .env_remove("INTERLINGUA_ADMIN_TOKEN")
            .args(["demo", "-c", file.to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the demo starts"),
    );
    let said = printed(&mut demo.0);
    let token = exported(&said, "TOKEN");
    let admin_token = exported(&said, "ADMIN_TOKEN");
    assert!(admin_token.len() >= 32, "{said}");
    assert!(
        said.contains(&format!("The console: http://{admin}/console ")),
        "{said}"
    );
    assert!(
        said.contains("a MIP-003 job is one step (1 credit), a Nevermined task two (2)"),
        "{said}"
    );

    // The console: its login page, a wrong token refused, the printed one let in.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = format!("http://{admin}/console/login");
    assert_eq!(http.get(&login).send().await.unwrap().status(), 200);
    let wrong = http
        .post(&login)
        .form(&[("token", "not-the-token")])
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let right = http
        .post(&login)
        .form(&[("token", admin_token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), 303);
    assert_eq!(right.headers()["location"], "/console");
    let cookie = right.headers()["set-cookie"].to_str().unwrap().to_string();
    let session = cookie.split(';').next().unwrap().to_string();
    let overview = http
        .get(format!("http://{admin}/console"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(overview.status(), 200);
    assert!(overview
        .text()
        .await
        .unwrap()
        .contains("masumi-as-nevermined"));

    // The Nevermined agent as a MIP-003 service, as printed: held 1, then 2 for its two steps.
    let before = balance(admin, &admin_token).await;
    assert_eq!(before["available"], 5, "{before}");
    let started = client()
        .post(format!("http://{proxy}/masumi/start_job"))
        .bearer_auth(&token)
        .json(&json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "hello world"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 200);
    let held = balance(admin, &admin_token).await;
    assert_eq!(held["held"], 1, "{held}");
    let job: Value = started.json().await.unwrap();
    let status = format!(
        "http://{proxy}/masumi/status?job_id={}",
        job["job_id"].as_str().unwrap()
    );
    until_done(&status, &token, "/status", "completed").await;
    let after = settled(admin, &admin_token).await;
    assert_eq!(
        (after["captured"].as_i64(), after["available"].as_i64()),
        (Some(2), Some(3)),
        "{after}"
    );

    // The MIP-003 agent as a Nevermined endpoint: 1, its one step.
    let did = "did:nv:0000000000000000000000000000000000000000000000000000000000000001";
    let created = client()
        .post(format!(
            "http://{proxy}/nevermined/api/v1/agents/{did}/tasks"
        ))
        .bearer_auth(&token)
        .json(&json!({"input_query": "hello world", "name": "demo"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let task: Value = created.json().await.unwrap();
    let task_url = format!(
        "http://{proxy}/nevermined/api/v1/agents/{did}/tasks/{}",
        task["task"]["task_id"].as_str().unwrap()
    );
    until_done(&task_url, &token, "/task/task_status", "Completed").await;
    let after = settled(admin, &admin_token).await;
    assert_eq!(
        (after["captured"].as_i64(), after["available"].as_i64()),
        (Some(3), Some(2)),
        "{after}"
    );

    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(demo.0.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    let stopped = eventually("the demo to stop", || {
        let done = demo.0.try_wait();
        async move {
            match done {
                Ok(Some(status)) => Ok(status),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    assert!(stopped.success(), "{stopped:?}");
}
