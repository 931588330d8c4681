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
    let out = Command::new("psql")
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
