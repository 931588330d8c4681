//! The `interlingua` binary: `check`, `--version`, and `serve` stopped by a real signal.

mod common;

use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::time::Instant;

use common::process::{interlingua, Served};
use common::{client, one_route, Upstream, DEADLINE};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::sync::Notify;

fn run(args: &[&str]) -> Output {
    interlingua().args(args).output().expect("run interlingua")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn version_names_the_crate_version() {
    let out = run(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        stdout(&out).trim(),
        format!("interlingua {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn every_file_in_config_passes_check() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let out = run(&["check", "-c", path.to_str().unwrap()]);
            assert!(
                out.status.success(),
                "{}:\n{}",
                path.display(),
                stdout(&out)
            );
            let line = stdout(&out);
            assert!(line.contains(": ok ("), "{line}");
            checked += 1;
        }
    }
    assert!(checked >= 1, "no config files found in {}", dir.display());
}

#[test]
fn check_without_a_file_uses_the_embedded_default_outside_the_repo() {
    let dir = tempfile::tempdir().unwrap();
    let out = interlingua()
        .arg("check")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stdout(&out));
    assert_eq!(
        stdout(&out).trim(),
        "<embedded default>: ok (1 listener(s), 3 upstream(s), 6 route(s), dialects: a2a, mcp, mip003, nevermined, openai_chat)"
    );
}

const BROKEN: &str = r#"[server]
threads = -3
grace_period = "5"

[log]
format = "xml"

[[listeners]]
address = "not-an-address"

[[upstreams]]
name = "a"
address = "127.0.0.1:9000"
read_timeout = "10m"
total_timeout = "1m"

[[upstreams]]
name = "a"
address = "http://example.com"
retries = 3

[[routes]]
match = { path_prefix = "api" }
upstream = "nowhere"
front = "mip999"

[[routes]]
match = { path_prefix = "/x", methods = ["GET", "not a method"] }
upstream = "a"
max_body = "huge"

[unknown_table]
x = 1
"#;

#[test]
fn check_reports_every_problem_with_its_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broken.toml");
    std::fs::write(&file, BROKEN).unwrap();
    let name = file.display().to_string();
    let out = run(&["check", "-c", &name]);
    assert_eq!(out.status.code(), Some(1));
    let lines: Vec<String> = stdout(&out)
        .lines()
        .map(|l| l.replacen(&name, "F", 1))
        .collect();
    let expected = [
        "F:2:11: server.threads: must be between 0 (one per CPU core) and 1024",
        "F:3:16: server.grace_period: `5` has no unit; write it as \"5s\" or \"5ms\"",
        "F:6:10: log: unknown variant `xml`, expected `text` or `json`",
        "F:9:11: listeners[0].address: `not-an-address` is not an address to listen on; write ip:port, e.g. \"127.0.0.1:8080\"",
        "F:14:16: upstreams[0].read_timeout: read_timeout (10m) is longer than total_timeout (1m)",
        "F:20:1: upstreams[1]: unknown field `retries`, expected one of `name`, `address`, `tls`, `sni`, `verify_certificate`, `connect_timeout`, `read_timeout`, `total_timeout`, `base_path`",
        "F:23:25: routes[0].match.path_prefix: must be a path starting with '/', without query or fragment",
        "F:24:12: routes[0].upstream: no upstream named `nowhere` (defined: a)",
        "F:25:9: routes[0].back: front `mip999` and back `passthrough`: passthrough is on both sides or neither",
        "F:28:49: routes[1].match.methods[1]: `not a method` is not an HTTP method",
        "F:30:12: routes[1].max_body: `huge` is not a size; examples: \"10MiB\", \"512KB\", \"1048576\"",
        "F:32:2: unknown_table: unknown section `unknown_table`; expected one of: server, log, admin, auth, store, limits, telemetry, listeners, upstreams, routes",
        "./mappings/mip999.toml: no mapping file for dialect `mip999`; available: a2a, lmos, mcp, mip003, multiagent_eval, nearai, nevermined, openai_chat, passthrough",
        "13 problem(s) found",
    ];
    assert_eq!(lines, expected, "\n{}", lines.join("\n"));
}

/// `check` of `file` (run from the repository) without `INTERLINGUA_DEV_SECRET`, the secret the
/// shipped config's key names: its exit code and lines.
fn check_without_the_secret(file: &str, extra: &[&str]) -> (Option<i32>, Vec<String>) {
    let out = interlingua()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("INTERLINGUA_DEV_SECRET")
        .args(["check", "-c", file])
        .args(extra)
        .output()
        .unwrap();
    let lines = stdout(&out).lines().map(|l| l.replace(file, "F")).collect();
    (out.status.code(), lines)
}

#[test]
fn check_names_an_unset_secret_once_and_checks_the_rest_without_it_when_asked() {
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/config/interlingua.toml");
    let unset = "auth.keys[0].secret_env: the environment variable `INTERLINGUA_DEV_SECRET` is not set (or empty)";
    // The cause, once: not also each route that needs [auth].
    let (code, lines) = check_without_the_secret(shipped, &[]);
    assert_eq!(code, Some(1), "{lines:?}");
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[0].starts_with("F:") && lines[0].ends_with(unset),
        "{lines:?}"
    );
    assert_eq!(lines[1], "1 problem(s) found");
    assert_eq!(
        lines[2],
        "1 of them: environment variable(s) not set here (INTERLINGUA_DEV_SECRET); \
         `check --allow-missing-env` checks the rest of the file without them"
    );
    // A deployment matter: a warning, and the rest of the file is fine.
    let (code, lines) = check_without_the_secret(shipped, &["--allow-missing-env"]);
    assert_eq!(code, Some(0), "{lines:?}");
    assert!(
        lines[0].starts_with("warning: F:") && lines[0].ends_with(unset),
        "{lines:?}"
    );
    assert!(lines[1].starts_with("F: ok ("), "{lines:?}");
    assert!(
        lines[1].ends_with("; set the 1 environment variable(s) warned of before serving"),
        "{lines:?}"
    );
    assert_eq!(lines.len(), 2, "{lines:?}");
    // A broken file is still broken: the secret a warning, the file's problem an error.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.toml");
    let text = std::fs::read_to_string(shipped).unwrap();
    std::fs::write(&broken, format!("{text}\n[unknown_table]\nx = 1\n")).unwrap();
    let broken = broken.to_str().unwrap();
    let (code, lines) = check_without_the_secret(broken, &["--allow-missing-env"]);
    assert_eq!(code, Some(1), "{lines:?}");
    assert!(
        lines[0].starts_with("warning: F:") && lines[0].ends_with(unset),
        "{lines:?}"
    );
    assert!(
        lines[1].contains("unknown_table: unknown section `unknown_table`"),
        "{lines:?}"
    );
    assert_eq!(lines[2..], ["1 problem(s) found"], "{lines:?}");
}

#[test]
fn check_refuses_an_upstream_keepalive_of_zero() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pool.toml");
    std::fs::write(&file, "[server]\nupstream_keepalive = 0\n").unwrap();
    let name = file.display().to_string();
    let out = run(&["check", "-c", &name]);
    assert_eq!(out.status.code(), Some(1));
    let first = stdout(&out)
        .lines()
        .next()
        .unwrap_or_default()
        .replacen(&name, "F", 1);
    assert_eq!(
        first,
        "F:2:22: server.upstream_keepalive: must be between 1 and 1048576"
    );
}

#[test]
fn check_reports_toml_syntax_errors_with_position() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("syntax.toml");
    std::fs::write(&file, "[server]\nthreads = \n").unwrap();
    let out = run(&["check", "-c", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let first = stdout(&out).lines().next().unwrap_or_default().to_string();
    assert!(
        first.starts_with(&format!("{}:2:", file.display())),
        "{first}"
    );
}

#[test]
fn check_of_a_missing_file_says_so() {
    let out = run(&["check", "-c", "/nonexistent/interlingua.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).starts_with("/nonexistent/interlingua.toml: cannot read the file"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn serve_refuses_to_start_on_a_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[[listeners]]\naddress = \"nope\"\n").unwrap();
    let out = run(&["serve", "-c", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("listeners[0].address"), "{err}");
    assert!(err.contains("nothing was started"), "{err}");
}

/// The standard test config, with its data directory relative to where `serve` runs.
fn test_config(server: &str, rest: &str) -> String {
    common::config(server, rest).replace("{data_dir}", "data")
}

fn serve(config: &str, dir: &Path) -> Served {
    serve_with_stderr(config, dir, Stdio::null())
}

/// Runs `interlingua serve` in `dir` on `config`, written to `dir/serve.toml`.
fn serve_with_stderr(config: &str, dir: &Path, stderr: Stdio) -> Served {
    let file = dir.join("serve.toml");
    std::fs::write(&file, config).unwrap();
    common::process::serve(&file, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_request_in_flight_finish_then_exits_0() {
    let release = Arc::new(Notify::new());
    let upstream = Upstream::held(release.clone(), "done").await;
    let dir = tempfile::tempdir().unwrap();
    let mut served = serve(
        &test_config("grace_period = \"20s\"", &one_route(upstream.addr, "", "")),
        dir.path(),
    );
    assert!(
        dir.path().join("data").is_dir(),
        "the data directory is created"
    );
    let in_flight = tokio::spawn(client().get(format!("http://{}/work", served.proxy)).send());
    upstream.wait_for_requests(1).await;

    kill(Pid::from_raw(served.child.id() as i32), Signal::SIGTERM).unwrap();
    // Still running while the request is held...
    let started = Instant::now();
    loop {
        if tokio::net::TcpStream::connect(served.proxy).await.is_err() {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "still accepting after SIGTERM"
        );
        tokio::task::yield_now().await;
    }
    assert!(
        served.child.try_wait().unwrap().is_none(),
        "exited with a request in flight"
    );
    // ...and done once it is answered.
    release.notify_one();
    let resp = in_flight.await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "done");
    let status = served.exited().await;
    assert_eq!(status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_an_idle_server_with_exit_code_0() {
    let upstream = Upstream::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let served = serve(
        &test_config("", &one_route(upstream.addr, "", "")),
        dir.path(),
    );
    let resp = client()
        .get(format!("http://{}/x", served.proxy))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    kill(Pid::from_raw(served.child.id() as i32), Signal::SIGINT).unwrap();
    let status = served.exited().await;
    assert_eq!(status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_carry_one_access_event_per_request() {
    let upstream = Upstream::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("stderr.log");
    let log_file = std::fs::File::create(&log_path).unwrap();
    let served = serve_with_stderr(
        &test_config(
            "",
            &format!(
                "[log]\nformat = \"json\"\nfilter = \"warn,interlingua::access=info\"\n\n{}",
                one_route(upstream.addr, "", "")
            ),
        ),
        dir.path(),
        Stdio::from(log_file),
    );
    let resp = client()
        .post(format!("http://{}/logged/path?secret=token", served.proxy))
        .header("x-request-id", "log-test-1")
        .body("12345")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "ok");
    kill(Pid::from_raw(served.child.id() as i32), Signal::SIGTERM).unwrap();
    let status = served.exited().await;
    assert_eq!(status.code(), Some(0));

    let log = std::fs::read_to_string(&log_path).unwrap();
    let events: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .filter(|v: &serde_json::Value| v["target"] == "interlingua::access")
        .collect();
    assert_eq!(events.len(), 1, "{log}");
    let e = &events[0];
    assert_eq!(e["request_id"], "log-test-1");
    assert_eq!(e["route"], "main");
    assert_eq!(e["method"], "POST");
    assert_eq!(
        e["path"], "/logged/path",
        "the query (which may hold secrets) is not logged"
    );
    assert_eq!(e["status"], 200);
    assert_eq!(e["bytes_in"], 5);
    assert_eq!(e["bytes_out"], 2);
    assert!(e["upstream_ms"].as_f64().unwrap() >= 0.0);
    assert!(e["total_ms"].as_f64().unwrap() >= e["upstream_ms"].as_f64().unwrap());
}

#[test]
fn check_reports_problems_in_the_mapping_files_a_config_names() {
    let dir = tempfile::tempdir().unwrap();
    let mappings = dir.path().join("mappings");
    std::fs::create_dir(&mappings).unwrap();
    std::fs::write(
        mappings.join("mydialect.toml"),
        "dialect = \"mydialect\"\n\n[operations.get_task]\nmethod = \"GET\"\npath = \"/t/{id}\"\nrequest = [\n  { param = \"id\", field = \"task.idd\" },\n]\n",
    )
    .unwrap();
    let config = format!(
        "[server]\nmappings_dir = \"{}\"\n[[listeners]]\naddress = \"127.0.0.1:0\"\n[[upstreams]]\nname = \"u\"\naddress = \"127.0.0.1:1\"\n\
         [[routes]]\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"u\"\nfront = \"mydialect\"\nback = \"mip003\"\n\
         vars.mip003 = {{ text_feld = \"q\" }}\n",
        mappings.display()
    );
    let file = dir.path().join("c.toml");
    std::fs::write(&file, config).unwrap();
    let out = run(&["check", "-c", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    let mapping = mappings.join("mydialect.toml").display().to_string();
    assert!(
        text.contains(&format!("{mapping}:7:27: operations.get_task.request[0].field: unknown canonical field `task.idd`")),
        "{text}"
    );
    assert!(text.ends_with("1 problem(s) found\n"), "{text}");

    // Once the mapping is right, the route's vars are checked against the dialect's.
    std::fs::write(
        mappings.join("mydialect.toml"),
        "dialect = \"mydialect\"\n\n[operations.get_task]\nmethod = \"GET\"\npath = \"/t/{id}\"\nrequest = [\n  { param = \"id\", field = \"task.id\" },\n]\n",
    )
    .unwrap();
    let out = run(&["check", "-c", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("routes[0].vars.mip003: `mip003` has no variable `text_feld`"),
        "{text}"
    );
}

#[test]
fn translate_runs_a_mapping_offline() {
    let out = translate_stdin(
        &[
            "--from",
            "nevermined",
            "--to",
            "mip003",
            "--op",
            "create_task",
            "--param",
            "did=did:nv:1",
            "-",
        ],
        r#"{"query":"hello","additional_params":[{"a":1},{"a":2,"b":3}]}"#,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["method"], "POST");
    assert_eq!(v["path"], "/start_job");
    assert_eq!(
        v["body"]["input_data"],
        serde_json::json!({"a": 2, "b": 3, "text": "hello"})
    );
    assert_eq!(
        v["body"]["identifier_from_purchaser"]
            .as_str()
            .unwrap()
            .len(),
        16
    );

    let dir = tempfile::tempdir().unwrap();
    let doc = dir.path().join("status.json");
    std::fs::write(&doc, r#"{"id":"s1","status":"weird"}"#).unwrap();
    let out = run(&[
        "translate",
        "--from",
        "mip003",
        "--to",
        "nevermined",
        "--op",
        "get_task",
        "--response",
        doc.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "interlingua translate: reading it as `mip003` get_task: `$.status` has the unknown status `weird`"
    );
}

/// `interlingua translate` with a document on standard input.
fn translate_stdin(args: &[&str], document: &str) -> Output {
    let mut child = interlingua()
        .arg("translate")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(document.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn translate_shows_or_fills_the_targets_own_path_parameters() {
    let job = r#"{"identifier_from_purchaser":"buyer-0001","input_data":{"text":"hi"}}"#;
    let args = [
        "--from",
        "mip003",
        "--to",
        "nevermined",
        "--op",
        "create_task",
    ];
    let body = serde_json::json!({
        "input_query": "hi",
        "input_additional": {"text": "hi"},
        "input_artifacts": []
    });

    let out = translate_stdin(&args, job);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"method": "POST", "path": "/api/v1/agents/{did}/tasks", "body": body})
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "interlingua translate: the path's `{did}` has no value; give it with --target-param did=VALUE\n"
    );

    let given = [&args[..], &["--target-param", "did=did:nv:abc"]].concat();
    let out = translate_stdin(&given, job);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["path"], "/api/v1/agents/did:nv:abc/tasks");
    assert_eq!(v["body"], body);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn token_mint_signs_with_a_configured_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        "[[listeners]]\naddress = \"127.0.0.1:0\"\n[auth]\nissuer = \"me\"\n[[auth.keys]]\nid = \"dev\"\ntype = \"hmac\"\nsecret_env = \"MINT_TEST_SECRET\"\n",
    )
    .unwrap();
    let out = interlingua()
        .env("MINT_TEST_SECRET", "mint-secret")
        .args([
            "token",
            "mint",
            "--sub",
            "alice",
            "--plan",
            "demo",
            "--ttl",
            "10m",
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
    let token = stdout(&out).trim().to_string();
    let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
    v.set_issuer(&["me"]);
    let data = jsonwebtoken::decode::<serde_json::Value>(
        &token,
        &jsonwebtoken::DecodingKey::from_secret(b"mint-secret"),
        &v,
    )
    .unwrap();
    assert_eq!(data.header.kid.as_deref(), Some("dev"));
    assert_eq!(data.claims["sub"], "alice");
    assert_eq!(data.claims["plan"], "demo");
    let ttl = data.claims["exp"].as_i64().unwrap() - data.claims["iat"].as_i64().unwrap();
    assert_eq!(ttl, 600);

    // Without the secret in the environment, nothing can be verified or minted: a config error.
    let out = interlingua()
        .args([
            "token",
            "mint",
            "--sub",
            "alice",
            "-c",
            file.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("the environment variable `MINT_TEST_SECRET` is not set"));
}

#[test]
fn the_tables_of_dialects_in_the_readme_and_the_docs_are_what_the_mapping_files_say() {
    let out = interlingua()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["dialects", "--markdown"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let generated = String::from_utf8(out.stdout).unwrap();
    for page in ["README.md", "docs/dialects.md"] {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(page)).unwrap();
        let start = text
            .find("<!-- dialects table:")
            .and_then(|i| text[i..].find('\n').map(|j| i + j + 1))
            .unwrap_or_else(|| panic!("{page} marks its dialects table"));
        let end = text
            .find("<!-- end of the dialects table -->")
            .unwrap_or_else(|| panic!("{page}: the dialects table's end"));
        assert_eq!(
            &text[start..end],
            generated,
            "{page}'s dialects table is stale: replace it with `interlingua dialects --markdown`"
        );
    }
}

#[test]
fn dialects_lists_every_form_of_every_operation() {
    let out = interlingua()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("dialects")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for line in [
        "a2a  A2A (Agent2Agent) JSON-RPC and HTTP+JSON  (mappings/a2a.toml)",
        "  cancel_task    front      POST   /tasks/{id}:cancel  (form `rest_in_cancel`)",
        "  create_task    front      POST   /  (form `stream`; 2 condition(s) on the request; answers with events)",
        "  create_task    back       POST   /v1/threads  (2 more call(s))",
    ] {
        assert!(text.lines().any(|l| l == line), "missing `{line}` in:\n{text}");
    }
}

/// The admin metrics of `served` once they show `line`.
async fn metrics_showing(served: &Served, line: &str) {
    let url = format!("http://{}/metrics", served.admin);
    common::wait::eventually(line, || async {
        let text = client()
            .get(&url)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .text()
            .await
            .map_err(|e| e.to_string())?;
        if text.lines().any(|l| l == line) {
            Ok(())
        } else {
            Err(text)
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_config_and_a_broken_file_leaves_it_serving() {
    let upstream = Upstream::ok().await;
    let dir = tempfile::tempdir().unwrap();
    // Only the signal reloads here: the file watcher is off.
    let route = |name: &str| {
        format!(
            "[[routes]]\nname = \"{name}\"\nmatch = {{ path_prefix = \"/{name}\" }}\nupstream = \"up\"\n\n"
        )
    };
    let upstreams = format!(
        "[[upstreams]]\nname = \"up\"\naddress = \"{}\"\n\n",
        upstream.addr
    );
    let one = test_config(
        "watch_config = false",
        &format!("{upstreams}{}", route("one")),
    );
    let mut served = serve(&one, dir.path());
    let get = |path: &str| {
        client()
            .get(format!("http://{}{path}", served.proxy))
            .send()
    };
    assert_eq!(get("/two").await.unwrap().status(), 404);
    let hup =
        |served: &Served| kill(Pid::from_raw(served.child.id() as i32), Signal::SIGHUP).unwrap();

    let file = dir.path().join("serve.toml");
    let two = test_config(
        "watch_config = false",
        &format!("{upstreams}{}{}", route("one"), route("two")),
    );
    std::fs::write(&file, two).unwrap();
    hup(&served);
    metrics_showing(&served, "interlingua_config_reloads_total{result=\"ok\"} 1").await;
    assert_eq!(get("/two").await.unwrap().status(), 200);

    // A broken file: reported, and the process serves on with what it had.
    std::fs::write(&file, "[server\n").unwrap();
    hup(&served);
    metrics_showing(
        &served,
        "interlingua_config_reloads_total{result=\"invalid\"} 1",
    )
    .await;
    assert!(
        served.child.try_wait().unwrap().is_none(),
        "SIGHUP stopped it"
    );
    assert_eq!(get("/two").await.unwrap().status(), 200);

    kill(Pid::from_raw(served.child.id() as i32), Signal::SIGTERM).unwrap();
    let status = served.exited().await;
    assert_eq!(status.code(), Some(0));
}

/// A route that sells on Masumi: `check` refuses windows the node would refuse, or that leave
/// the agent too little time, and a front that cannot show a payment request; the ok line is
/// followed by what each selling route asks of its buyers.
#[test]
fn check_judges_a_selling_routes_windows_and_front_and_says_what_it_sells() {
    let dir = tempfile::tempdir().unwrap();
    let write = |front: &str, sell: &str| {
        let config = format!(
            "[[listeners]]\naddress = \"127.0.0.1:0\"\n[[upstreams]]\nname = \"u\"\naddress = \"127.0.0.1:1\"\n\
             [[routes]]\nname = \"sold\"\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"u\"\nfront = \"{front}\"\nback = \"nevermined\"\n\
             [routes.payment.accept.masumi]\nurl = \"http://127.0.0.1:3001/api/v1\"\ntoken_env = \"INTERLINGUA_CLI_SELLER_KEY\"\n\
             agent_identifier = \"{}\"\n{sell}\n",
            "0c2912d4".repeat(8)
        );
        let file = dir.path().join("sell.toml");
        std::fs::write(&file, config).unwrap();
        let out = interlingua()
            .args(["check", "-c", file.to_str().unwrap()])
            .env("INTERLINGUA_CLI_SELLER_KEY", "k")
            .output()
            .unwrap();
        (out.status.code(), stdout(&out))
    };
    let (code, text) = write("mip003", "max_run = \"2h\"");
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("routes[0] (`sold`): sells as 0c2912…12d4 on Preprod, payByTime +12h, submitResultTime +1day, max_run 2h"),
        "{text}"
    );
    let (code, text) = write("mip003", "max_run = \"2h\"\nsubmit_result_by = \"13h\"");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("routes[0].payment.accept.masumi.submit_result_by: 13h leaves 1h after pay_by; a buyer may lock as late as pay_by, and max_run (2h) and the node's 5m before submitResultTime need 2h 5m"),
        "{text}"
    );
    let (code, text) = write("a2a", "max_run = \"2h\"");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("routes[0].payment.accept.masumi: the front `a2a` cannot sell a job"),
        "{text}"
    );
    let (code, text) = write("mip003", "");
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("max_run"), "{text}");
}
