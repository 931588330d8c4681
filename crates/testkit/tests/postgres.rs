//! The test cluster starts, serves a fresh database, and is gone once stopped.

use std::process::Command;

use testkit::postgres::Postgres;

#[test]
fn a_cluster_serves_fresh_databases_and_stops() {
    let pg = Postgres::start();
    let url = pg.database("first");
    assert_eq!(
        url,
        format!("postgres://postgres@127.0.0.1:{}/first", pg.port())
    );
    let out = Command::new(pg.program("psql"))
        .args([url.as_str(), "-XAtc", "SHOW fsync; SHOW synchronous_commit"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "off\non\n");
    let pid = std::fs::read_to_string(pg.dir().join("data/postmaster.pid")).unwrap();
    let pid = pid.lines().next().unwrap().to_string();
    pg.stop();
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    assert!(std::net::TcpStream::connect(("127.0.0.1", pg.port())).is_err());
}

/// A server started by a process that dies without dropping it (a crash, a kill, a `static`)
/// ends with it. The test runs itself again as that process, which aborts.
#[test]
fn the_server_ends_with_the_process_that_started_it() {
    const CHILD: &str = "TESTKIT_POSTGRES_CHILD";
    if let Ok(out) = std::env::var(CHILD) {
        let pg = Box::leak(Box::new(Postgres::start()));
        let pid = std::fs::read_to_string(pg.dir().join("data/postmaster.pid")).unwrap();
        std::fs::write(out, pid.lines().next().unwrap()).unwrap();
        std::process::abort();
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pid");
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "the_server_ends_with_the_process_that_started_it",
        ])
        .env(CHILD, &out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success());
    let pid = std::fs::read_to_string(&out).unwrap();
    let alive = std::path::Path::new("/proc").join(pid.trim());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while alive.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "postgres {pid} outlived its process"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
