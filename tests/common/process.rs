//! Child processes: the `interlingua` binary itself, and a child's output read line by line.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use super::secrets::{ADMIN_ENV, ADMIN_TOKEN, HS_ENV, HS_SECRET};
use super::DEADLINE;

/// The `interlingua` binary, without `RUST_LOG`, with every secret a test config names in its
/// environment: the tests' own ([`super::secrets`]) and the default config's development key and
/// admin token.
pub fn interlingua() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_interlingua"));
    cmd.env_remove("RUST_LOG")
        .env("INTERLINGUA_DEV_SECRET", "cli-test-secret")
        .env("INTERLINGUA_ADMIN_TOKEN", "cli-test-admin-token")
        .env(HS_ENV, HS_SECRET)
        .env(ADMIN_ENV, ADMIN_TOKEN);
    cmd
}

/// The lines `out` yields, sent on as they come by a thread of their own; the channel closes
/// when `out` does.
pub fn lines(out: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// A running `interlingua serve`.
pub struct Served {
    pub child: Child,
    /// The first proxy listener's address, from the ready line.
    pub proxy: SocketAddr,
    /// The admin listener's address, from the ready line.
    pub admin: SocketAddr,
}

impl Served {
    /// Waits, off the async runtime's threads, up to [`DEADLINE`] for the process to exit (a
    /// signal sent to it); its exit status.
    pub async fn exited(mut self) -> ExitStatus {
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            loop {
                if let Some(status) = self.child.try_wait().expect("the process's status") {
                    return status;
                }
                assert!(started.elapsed() < DEADLINE, "the process did not exit");
                std::thread::sleep(Duration::from_millis(10));
            }
        })
        .await
        .expect("the wait for the process")
    }

    /// Kills the process outright (SIGKILL: no graceful anything) and waits for it to be gone.
    pub fn kill(mut self) {
        self.child.kill().expect("kill interlingua serve");
        self.child.wait().expect("wait for interlingua serve");
    }
}

/// Runs `interlingua serve -c <config>` in the config's directory, its stderr to `stderr`, and
/// waits up to [`DEADLINE`] for the ready line, the sign that its listeners are bound. Panics if
/// the first line is anything else.
pub fn serve(config: &Path, stderr: Stdio) -> Served {
    let mut child = interlingua()
        .args(["serve", "-c", config.to_str().expect("a UTF-8 path")])
        .current_dir(config.parent().expect("the config's directory"))
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("start interlingua serve");
    let stdout = lines(child.stdout.take().expect("piped stdout"));
    let line = stdout
        .recv_timeout(DEADLINE)
        .expect("serve printed its ready line");
    // interlingua ready: proxy <addr>[,<addr>…] admin <addr>
    let words: Vec<&str> = line.split(' ').collect();
    let (proxy, admin) = match words.as_slice() {
        ["interlingua", "ready:", "proxy", proxies, "admin", admin] => (
            proxies.split(',').next().and_then(|a| a.parse().ok()),
            admin.parse().ok(),
        ),
        _ => (None, None),
    };
    let (Some(proxy), Some(admin)) = (proxy, admin) else {
        panic!("unexpected ready line: {line}");
    };
    Served {
        child,
        proxy,
        admin,
    }
}
