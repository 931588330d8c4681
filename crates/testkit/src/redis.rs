//! Redis for tests: see the crate's opening comment.
//!
//! `redis-server` runs with no persistence (`--save '' --appendonly no`), its working directory a
//! temporary one, on a port of 127.0.0.1 that was free a moment before (bound to port 0, closed,
//! then given to Redis; when another process takes it in between, Redis fails to start and the
//! next free port is tried). [`Redis::start`] returns once the server answers `PING`.
//!
//! A server must not outlive the test process, even one that panics or is killed (SIGKILL leaves
//! no `Drop` to run): the server is started through `setpriv --pdeathsig KILL` (util-linux), so the
//! kernel kills it when the thread that started it ends, and `Drop` kills it before that. Start
//! it from the test's own thread (an `async fn` test's body runs there), not from a
//! `spawn_blocking` thread, which may end while the test still needs the server.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long a server has to start answering.
const START_DEADLINE: Duration = Duration::from_secs(20);
/// Fresh ports tried when the one picked is taken before Redis binds it.
const PORT_ATTEMPTS: usize = 5;

/// Why a Redis server could not be started.
#[derive(Debug)]
pub enum RedisError {
    /// `redis-server` could not be run (not installed?).
    Spawn(std::io::Error),
    /// No temporary directory, or no free port.
    Io(std::io::Error),
    /// It exited, or did not answer in time; with its log.
    NotReady { deadline: Duration, log: String },
}

impl std::fmt::Display for RedisError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedisError::Spawn(e) => write!(
                f,
                "cannot start redis-server (is the `redis-server` package installed?): {e}"
            ),
            RedisError::Io(e) => write!(
                f,
                "cannot make the server's directory or find a free port: {e}"
            ),
            RedisError::NotReady { deadline, log } => write!(
                f,
                "redis-server did not answer PING within {deadline:?}; its log:\n{log}"
            ),
        }
    }
}

impl std::error::Error for RedisError {}

/// A running `redis-server`, killed (and its directory removed) when dropped.
pub struct Redis {
    port: u16,
    dir: TempDir,
    child: Option<Child>,
}

impl Redis {
    /// Starts a server on a free port of 127.0.0.1 and waits until it answers `PING`.
    pub fn start() -> Result<Redis, RedisError> {
        let dir = tempfile::Builder::new()
            .prefix("interlingua-redis-")
            .tempdir()
            .map_err(RedisError::Io)?;
        let mut redis = Redis {
            port: 0,
            dir,
            child: None,
        };
        let mut attempt = 0;
        loop {
            redis.port = free_port().map_err(RedisError::Io)?;
            match redis.launch() {
                Ok(()) => return Ok(redis),
                // Most likely the port was taken in between: another one.
                Err(_) if attempt + 1 < PORT_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port it listens on (the same across [`Redis::stop`] and [`Redis::restart`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server and waits until it is gone: clients then meet a refused connection.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open and nothing answers, as with a Redis
    /// that hangs. [`Redis::resume`] thaws it.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a server frozen by [`Redis::pause`] (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, which: &str) {
        if let Some(child) = &self.child {
            let sent = Command::new("kill")
                .arg(which)
                .arg(child.id().to_string())
                .status();
            assert!(
                sent.is_ok_and(|s| s.success()),
                "kill {which} redis-server failed"
            );
        }
    }

    /// Starts the server again on the same port (empty: nothing is persisted), once stopped.
    pub fn restart(&mut self) -> Result<(), RedisError> {
        self.stop();
        let deadline = Instant::now() + START_DEADLINE;
        // The port may still be held by a client's socket of the last server for a moment; Redis
        // binds with SO_REUSEADDR, so only a live listener stops it, and that cannot last.
        loop {
            match self.launch() {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn launch(&mut self) -> Result<(), RedisError> {
        let log = self.log_path();
        let _ = std::fs::remove_file(&log);
        let mut cmd = if std::path::Path::new("/usr/bin/setpriv").exists() {
            let mut c = Command::new("setpriv");
            c.args(["--pdeathsig", "KILL", "--", "redis-server"]);
            c
        } else {
            Command::new("redis-server")
        };
        cmd.args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().map_err(RedisError::Spawn)?;
        self.child = Some(child);
        let deadline = Instant::now() + START_DEADLINE;
        let mut pause = Duration::from_millis(5);
        loop {
            if ping(self.port) {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))));
            if exited || Instant::now() >= deadline {
                self.stop();
                return Err(RedisError::NotReady {
                    deadline: START_DEADLINE,
                    log: std::fs::read_to_string(&log).unwrap_or_default(),
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Whether a server on `port` answers `PING` with `+PONG` (RESP, written by hand).
fn ping(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"*1\r\n$4\r\nPING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}
