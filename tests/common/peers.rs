//! Real third-party peers written in Python (`tests/peers/`), each run from the virtualenv holding
//! its requirements (the official MCP SDK's two major versions both import as `mcp`, so they get
//! a virtualenv each):
//!
//! | function | requirements | virtualenv | override |
//! |---|---|---|---|
//! | [`peers_python`] | `tests/peers/requirements.txt` | `target/peers-venv` | `$INTERLINGUA_PEERS_PYTHON` |
//! | [`mcp2_python`] | `tests/peers/requirements-mcp2.txt` (mcp 2.3.0) | `target/mcp2-venv` | `$INTERLINGUA_MCP2_PYTHON` |
//! | [`mcp1_python`] | `tests/peers/requirements-mcp1.txt` (mcp 1.30.0) | `target/mcp1-venv` | `$INTERLINGUA_MCP1_PYTHON` |
//! | [`x402_python`] | `tests/peers/requirements-x402.txt` (x402 2.25.0) | `target/x402-venv` | `$INTERLINGUA_X402_PYTHON` |
//!
//! The override, if set, names a Python to use as it is; otherwise the virtualenv is created on
//! first use (needs `python3` with `venv`) and re-installed whenever the requirements file
//! changes: a stamp, a copy of the requirements it holds, sits in the virtualenv (`cargo xtask
//! test` prebuilds them the same way, `xtask/src/venvs.rs`).
//!
//! A server peer ([`Peer`]) prints one line naming its port once it accepts connections and
//! serves until its stdin closes or it is killed; a one-shot peer ([`run_script`]) prints its
//! findings on stdout and exits. Every wait here has [`DEADLINE`] or a caller's deadline.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::process::lines;
use super::DEADLINE;

/// The repository's root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One virtualenv: made once per test binary, by the first test that asks for it.
#[derive(Default)]
struct Venv {
    python: OnceLock<PathBuf>,
    building: Mutex<()>,
}

/// The Python of the virtualenv `target/<name>-venv` holding `tests/peers/<requirements>`, or
/// the Python named by the environment variable `env_override` if set.
///
/// Tests of one binary run in parallel: the first caller builds the virtualenv while the others
/// wait for it, so that two `pip install`s never race in one directory. Each virtualenv (each
/// `name`) has its own lock, so building one does not hold up the users of another.
pub fn venv_python(name: &str, requirements: &str, env_override: &str) -> PathBuf {
    static VENVS: Mutex<BTreeMap<String, Arc<Venv>>> = Mutex::new(BTreeMap::new());
    let venv = VENVS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(name.to_string())
        .or_default()
        .clone();
    if let Some(p) = venv.python.get() {
        return p.clone();
    }
    let _building = venv.building.lock().unwrap_or_else(|e| e.into_inner());
    venv.python
        .get_or_init(|| make_venv(name, requirements, env_override))
        .clone()
}

/// The Python of the virtualenv holding `tests/peers/requirements.txt` (masumi, a2a-sdk,
/// payments-py), created on first use.
pub fn peers_python() -> PathBuf {
    venv_python("peers", "requirements.txt", "INTERLINGUA_PEERS_PYTHON")
}

/// The Python of the virtualenv holding the official MCP SDK 2.3.0 (`mcp_client2.py`,
/// `mcp_server2.py`), created on first use.
pub fn mcp2_python() -> PathBuf {
    venv_python("mcp2", "requirements-mcp2.txt", "INTERLINGUA_MCP2_PYTHON")
}

/// The Python of the virtualenv holding the official MCP SDK 1.30.0, the last with Tasks
/// (`mcp_client1.py`, `mcp_server1.py`), created on first use.
pub fn mcp1_python() -> PathBuf {
    venv_python("mcp1", "requirements-mcp1.txt", "INTERLINGUA_MCP1_PYTHON")
}

/// The Python of the virtualenv holding the official x402 SDK 2.25.0 with its EVM mechanisms
/// (web3.py, eth-account), FastAPI and httpx: the x402 peers (`x402_*.py`, [`super::chain`]),
/// created on first use.
pub fn x402_python() -> PathBuf {
    venv_python("x402", "requirements-x402.txt", "INTERLINGUA_X402_PYTHON")
}

fn make_venv(name: &str, requirements: &str, env_override: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env_override) {
        return PathBuf::from(p);
    }
    let venv = root().join("target").join(format!("{name}-venv"));
    let python = venv.join("bin").join("python");
    // The stamp has the requirements file's name, as `.ci/run` writes it.
    let stamp = venv.join(requirements);
    let requirements = root().join("tests/peers").join(requirements);
    let wanted = std::fs::read_to_string(&requirements)
        .unwrap_or_else(|e| panic!("reading {}: {e}", requirements.display()));
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return python;
    }
    let status = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .expect(
            "python3 is needed for the tests against real peers (Debian: python3 python3-venv)",
        );
    assert!(
        status.success(),
        "python3 -m venv {} failed",
        venv.display()
    );
    let status = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "-r"])
        .arg(&requirements)
        .status()
        .expect("pip");
    assert!(
        status.success(),
        "installing the peers' requirements ({}) failed",
        requirements.display()
    );
    std::fs::write(&stamp, wanted).expect("stamp");
    python
}

/// A Python server peer; killed when dropped.
pub struct Peer {
    child: Child,
    // Held open: the peers exit when their stdin closes.
    _stdin: Option<ChildStdin>,
    /// The port it listens on, on 127.0.0.1.
    pub port: u16,
}

impl Peer {
    /// Starts `tests/peers/<script>` with `args` and `env` and waits (up to [`DEADLINE`]) for the
    /// line that names its port: `PORT=<n>` (the Masumi peers) or `listening <n>` (the A2A agent).
    /// Panics if the peer exits or says anything else first.
    pub fn start(python: &Path, script: &str, args: &[&str], env: &[(&str, String)]) -> Peer {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut cmd = Command::new(python);
        cmd.arg(root().join("tests/peers").join(script))
            .args(args)
            .current_dir(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start a Python peer");
        let stdin = child.stdin.take();
        let stdout = lines(child.stdout.take().expect("piped stdout"));
        let line = stdout
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|_| panic!("{script} did not report its port"));
        let port = line
            .strip_prefix("PORT=")
            .or_else(|| line.strip_prefix("listening "))
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("{script}: unexpected first line {line:?}"));
        Peer {
            child,
            _stdin: stdin,
            port,
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a one-shot peer did.
#[derive(Debug)]
pub struct Ran {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `tests/peers/<script>` with `args` to its end and returns its output; kills it and
/// panics if it is still running after `deadline`. Blocking: call it from `spawn_blocking`.
pub fn run_script(python: &Path, script: &str, args: &[String], deadline: Duration) -> Ran {
    let mut child = Command::new(python)
        .arg(root().join("tests/peers").join(script))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a Python peer");
    let pid = child.id();
    let read = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = read(Box::new(child.stdout.take().expect("piped stdout")));
    let err = read(Box::new(child.stderr.take().expect("piped stderr")));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(deadline) {
        Ok(status) => status.expect("wait for a Python peer"),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let stderr = err.join().unwrap_or_default();
            panic!("{script} {args:?} still running after {deadline:?}; stderr:\n{stderr}");
        }
    };
    Ran {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// Runs a one-shot peer that prints one JSON object ([`run_script`]) and returns that object;
/// panics, with its output, if it fails or prints anything else.
pub fn run_json(
    python: &Path,
    script: &str,
    args: &[String],
    deadline: Duration,
) -> serde_json::Value {
    let ran = run_script(python, script, args, deadline);
    assert!(
        ran.status.success(),
        "{script} {args:?} failed: {}\n{}\n{}",
        ran.status,
        ran.stdout,
        ran.stderr
    );
    serde_json::from_str(ran.stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "{script} {args:?} printed no JSON object ({e}): {}\nstderr:\n{}",
            ran.stdout, ran.stderr
        )
    })
}

/// The masumi 1.2.0 agent (`masumi_agent.py`) with the payment-service stand-in it waits on at
/// `standin_port`, polling it every 0.2 s. Blocking.
pub fn masumi_agent(python: &Path, standin_port: u16) -> Peer {
    Peer::start(
        python,
        "masumi_agent.py",
        &[],
        &[
            (
                "PAYMENT_SERVICE_URL",
                format!("http://127.0.0.1:{standin_port}/api/v1"),
            ),
            ("PAYMENT_API_KEY", "testkey".to_string()),
            ("SELLER_VKEY", "seller_vkey_hex_0123".to_string()),
            (
                "AGENT_IDENTIFIER",
                "agent_policyid_plus_assetname_0000000000000000000000000000000000".to_string(),
            ),
            ("NETWORK", "Preprod".to_string()),
            // masumi polls the payment node every 10 s; the peer shortens that for tests.
            ("PEER_PAYMENT_POLL_SECONDS", "0.2".to_string()),
        ],
    )
}
