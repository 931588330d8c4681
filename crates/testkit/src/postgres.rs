//! A PostgreSQL cluster for tests and the benchmark: `initdb` into a temporary directory, the
//! server on a free port of loopback (and a unix socket in the directory), one fresh database per
//! test ([`Postgres::database`]).
//!
//! The server must not outlive the process that started it, even when that process panics or is
//! killed, and even when the [`Postgres`] sits in a `static` (whose drop never runs). So it is
//! started through `setpriv --pdeathsig QUIT`: the kernel sends it SIGQUIT (PostgreSQL's immediate
//! shutdown) when the thread that started it ends. That thread is [`crate::spawner`]'s, living as
//! long as the process (a test's own thread ends with the test). The directories of servers ended
//! that way are removed by the next [`Postgres::start`] (`sweep`). PostgreSQL refuses to run as
//! root: as root, `setpriv` also switches to the `postgres` user, which owns the directory.

use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::spawner;

/// The prefix of every cluster's directory under the temporary directory.
const PREFIX: &str = "interlingua-pg-";
/// How long a start may take before it fails with the server's log.
const READY: Duration = Duration::from_secs(30);

/// A running PostgreSQL cluster; stopped (fast shutdown) and its files removed when dropped.
pub struct Postgres {
    dir: tempfile::TempDir,
    port: u16,
    child: Mutex<Option<Child>>,
    bin: PathBuf,
}

impl Postgres {
    /// A cluster for tests: `fsync=off` (a test's data need not survive a power cut; commits
    /// still wait for the server, `synchronous_commit` stays on).
    pub fn start() -> Postgres {
        Postgres::launch(false)
    }

    /// A cluster with PostgreSQL's default durability (fsync on), for the benchmark.
    pub fn durable() -> Postgres {
        Postgres::launch(true)
    }

    fn launch(durable: bool) -> Postgres {
        sweep();
        let bin = binaries();
        let dir = tempfile::Builder::new()
            .prefix(PREFIX)
            .tempdir()
            .expect("a temporary directory for PostgreSQL");
        let as_postgres = running_as_root();
        if as_postgres {
            run(Command::new("chown").arg("postgres:").arg(dir.path()));
        }
        let data = dir.path().join("data");
        run(user(as_postgres, &bin.join("initdb"))
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "-D",
            ])
            .arg(&data)
            .current_dir(dir.path()));
        // A free port is only free until someone else binds it: start again on another.
        let log = dir.path().join("postgres.log");
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            let mut server = user(as_postgres, &bin.join("postgres"));
            server
                .arg("-D")
                .arg(&data)
                .args(["-p", &port.to_string()])
                .args(["-c", "listen_addresses=127.0.0.1"])
                .arg("-c")
                .arg(format!("unix_socket_directories={}", dir.path().display()))
                .args(["-c", "max_connections=300"])
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(File::create(&log).expect("the server's log"));
            if !durable {
                server.args(["-c", "fsync=off"]);
            }
            let mut child = spawner::spawn(server).expect("setpriv and postgres run");
            match wait_ready(&bin, port, &mut child) {
                Ok(()) => {
                    return Postgres {
                        dir,
                        port,
                        child: Mutex::new(Some(child)),
                        bin,
                    }
                }
                Err(why) => {
                    shut_down(&mut child);
                    last = format!(
                        "{why}\n{}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                }
            }
        }
        panic!("PostgreSQL did not start: {last}");
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of the `postgres` database, as the superuser `postgres` (trust authentication).
    pub fn url(&self) -> String {
        self.url_of("postgres")
    }

    fn url_of(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates a fresh, empty database and returns its URL (one per test).
    pub fn database(&self, name: &str) -> String {
        run(Command::new(self.bin.join("createdb"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .arg(name));
        self.url_of(name)
    }

    /// Stops the server (fast shutdown: connections are closed, nothing waits for clients).
    pub fn stop(&self) {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut c) = child.take() {
            shut_down(&mut c);
        }
    }

    /// One of PostgreSQL's programs (`psql`, `pg_dump`, …), from where the server's was found.
    pub fn program(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    /// The cluster's directory (its log is `postgres.log` there).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Polls `pg_isready` with a short backoff until the server accepts connections, it exits, or
/// [`READY`] has passed.
fn wait_ready(bin: &Path, port: u16, child: &mut Child) -> Result<(), String> {
    let deadline = Instant::now() + READY;
    let mut pause = Duration::from_millis(10);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("the server exited ({status})"));
        }
        // A TCP connect first: cheap, and pg_isready is a process per try.
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            let ready = Command::new(bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if ready {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(format!("not accepting connections after {READY:?}"));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// SIGINT (fast shutdown), waited for; SIGKILL if it does not end in 10 s.
fn shut_down(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The directory of PostgreSQL's programs: Debian keeps them out of PATH, under
/// `/usr/lib/postgresql/<version>/bin` (the newest is taken); elsewhere, PATH.
fn binaries() -> PathBuf {
    let root = Path::new("/usr/lib/postgresql");
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    if let Some((_, bin)) = found.pop() {
        return bin;
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .find(|d| d.join("postgres").exists() && d.join("initdb").exists())
        .expect(
            "PostgreSQL's programs (initdb, postgres) under /usr/lib/postgresql/*/bin or on PATH",
        )
}

/// Whether this process runs as root (`/proc/self` belongs to the effective user).
fn running_as_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// `program`, run as the `postgres` user when `as_postgres`, and sent SIGQUIT when the thread
/// that started it ends (see the module's comment).
fn user(as_postgres: bool, program: &Path) -> Command {
    let mut c = Command::new("setpriv");
    if as_postgres {
        c.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--reset-env",
        ]);
    }
    c.args(["--pdeathsig", "QUIT", "--"]).arg(program);
    c
}

fn run(command: &mut Command) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?} did not run: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on loopback")
}

/// Removes the directories of clusters whose server is gone (ended with the process that
/// started it, so never dropped). A directory is kept while its server runs, and for ten
/// minutes after it was made (a cluster being set up has no server yet).
fn sweep() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(PREFIX) {
            continue;
        }
        let path = entry.path();
        let young = entry
            .metadata()
            .and_then(|m| m.modified())
            .map(|t| {
                t.elapsed()
                    .map(|e| e < Duration::from_secs(600))
                    .unwrap_or(true)
            })
            .unwrap_or(true);
        let pid = std::fs::read_to_string(path.join("data/postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| l.trim().parse::<u32>().ok()));
        let alive = pid.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if !young && !alive {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}
