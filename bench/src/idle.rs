//! Memory after idle connections: interlingua's resident memory (`VmRSS`) before, while N client
//! connections sit idle on it, once its own timeouts have closed them all, and after one more
//! request (which lets the allocator hand back what it freed). Two kinds of idle connection,
//! each on a fresh interlingua with 2 s timeouts:
//!
//! - *silent*: opened, nothing sent; closed at `client_header_timeout`;
//! - *after one request*: one `GET` answered, then nothing; closed at `keepalive_timeout`.
//!
//! Memory that stays after the connections are gone is either the allocator's (freed, kept for
//! reuse: a second round of connections does not add to it) or state kept per closed connection
//! (it would grow round after round); [`rounds`] tells them apart.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::curves::{format_count, Curve, Row, Targets};
use crate::http::Request;
use crate::procs::{peak_rss_mib, rss_mib};
use crate::stack::{Env, Route, Running, DID};

/// interlingua's `client_header_timeout` and `keepalive_timeout` during the measurement.
const IDLE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the process is left alone before each reading.
const SETTLE: Duration = Duration::from_secs(1);

/// What idle connections do before they are left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    Silent,
    AfterOneRequest,
}

impl Idle {
    fn name(self) -> &'static str {
        match self {
            Idle::Silent => "silent",
            Idle::AfterOneRequest => "after one request",
        }
    }
}

/// One measurement: MiB resident at each stage.
#[derive(Debug, Clone)]
pub struct Point {
    pub connections: usize,
    pub idle: Idle,
    pub before: f64,
    /// While the connections are open, one per round.
    pub held: Vec<f64>,
    /// Once the proxy has closed them, one per round.
    pub after: Vec<f64>,
    pub after_request: f64,
    pub peak: f64,
}

impl Point {
    pub fn line(&self) -> String {
        let list = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.1}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "{} idle connections ({}): RSS {:.1} MiB before, {} held, {} after they closed, {:.1} after one more request; peak {:.1}",
            self.connections,
            self.idle.name(),
            self.before,
            list(&self.held),
            list(&self.after),
            self.after_request,
            self.peak
        )
    }
}

/// Measures `connections` idle connections of one kind, `rounds` times on one fresh interlingua
/// in front of `upstream`.
pub fn measure(
    env: &Env,
    upstream: SocketAddr,
    connections: usize,
    idle: Idle,
    rounds: usize,
) -> Result<Point, String> {
    let name = format!("idle-{}-{connections}", idle.name().replace(' ', "-"));
    let routes = [Route::Passthrough { prefix: "/".into() }];
    let config = env.interlingua_dir(&name, upstream, &routes)?;
    let text = std::fs::read_to_string(&config).map_err(|e| e.to_string())?;
    let secs = IDLE_TIMEOUT.as_secs();
    let text = text.replacen(
        "[server]\n",
        &format!(
            "[server]\nclient_header_timeout = \"{secs}s\"\nkeepalive_timeout = \"{secs}s\"\n"
        ),
        1,
    );
    std::fs::write(&config, text).map_err(|e| e.to_string())?;
    let run = env.serve(&name, &config, Duration::from_secs(30))?;
    let pid = run.service.pid;
    let rss = || rss_mib(pid).ok_or_else(|| format!("{name}: no VmRSS"));
    let path = format!("/api/v1/agents/{DID}/tasks/{}", crate::canned::STATIC_TASK);
    let get = Request::get(path.clone());
    get.send(run.addr, Duration::from_secs(5))?;
    std::thread::sleep(SETTLE);
    let before = rss()?;
    let (mut held, mut after) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let open = open_idle(&run, &path, connections, idle)?;
        std::thread::sleep(SETTLE);
        held.push(rss()?);
        wait_closed(open, IDLE_TIMEOUT * 3)?;
        std::thread::sleep(SETTLE * 2);
        after.push(rss()?);
    }
    get.send(run.addr, Duration::from_secs(5))?;
    std::thread::sleep(SETTLE);
    let after_request = rss()?;
    let peak = peak_rss_mib(pid, false).unwrap_or(f64::NAN);
    Ok(Point {
        connections,
        idle,
        before,
        held,
        after,
        after_request,
        peak,
    })
}

/// Opens `n` connections to `run`, each left as `idle` says.
fn open_idle(run: &Running, path: &str, n: usize, idle: Idle) -> Result<Vec<TcpStream>, String> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", run.addr);
    let mut open = Vec::with_capacity(n);
    for i in 0..n {
        let mut s = TcpStream::connect(run.addr).map_err(|e| format!("connection {i}: {e}"))?;
        if idle == Idle::AfterOneRequest {
            s.write_all(request.as_bytes())
                .map_err(|e| format!("connection {i}: {e}"))?;
            read_answer(&mut s).map_err(|e| format!("connection {i}: {e}"))?;
        }
        open.push(s);
    }
    Ok(open)
}

/// Reads one answer with a `Content-Length` (the canned upstream's).
fn read_answer(s: &mut TcpStream) -> Result<(), String> {
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("closed before an answer".into());
        }
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if body.len() >= len {
                return Ok(());
            }
        }
    }
}

/// Waits until the proxy has closed every connection (end of stream or reset), `limit` at most.
fn wait_closed(open: Vec<TcpStream>, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 512];
    for mut s in open {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("idle connections still open after {limit:?}"));
            }
            s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
    Ok(())
}

/// About how long [`measure`] takes: the start, then per round the wait for the proxy's
/// timeout and the readings.
fn cost(rounds: usize) -> Duration {
    Duration::from_secs(5) + (IDLE_TIMEOUT + SETTLE * 4) * rounds as u32
}

/// The curve of the run: both kinds at each of the plan's connection counts, two rounds each
/// (one in quick mode).
pub fn curve(t: &Targets) -> Curve {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let rounds = if t.plan.quick { 1 } else { 2 };
    for &n in &t.plan.idle_connections {
        for idle in [Idle::Silent, Idle::AfterOneRequest] {
            if !t.clock.fits(cost(rounds)) {
                notes.push(format!(
                    "{n} idle connections ({}): skipped (time budget)",
                    idle.name()
                ));
                continue;
            }
            match measure(t.env, t.upstream.addr, n, idle, rounds) {
                Ok(p) => {
                    notes.push(p.line());
                    rows.push(Row {
                        x: n as f64,
                        series: format!("interlingua, {}", idle.name()),
                        metrics: vec![
                            ("RSS before MiB", Some(p.before)),
                            ("RSS held MiB", p.held.first().copied()),
                            ("RSS after MiB", p.after.last().copied()),
                            ("RSS after a request MiB", Some(p.after_request)),
                            ("peak RSS MiB", Some(p.peak)),
                        ],
                    });
                }
                Err(e) => notes.push(format!("{n} idle connections ({}): {e}", idle.name())),
            }
        }
    }
    Curve {
        file: "idle_connections",
        title: "Resident memory with idle connections, and after they close".into(),
        x_label: "idle connections",
        x_format: format_count,
        plotted: vec!["RSS held MiB", "RSS after MiB"],
        y_label: "RSS (MiB)",
        rows,
        notes,
    }
}

/// `interlingua-bench idle` on its own: both kinds at `connections`, `rounds` rounds each, one
/// line per kind.
pub fn alone(env: &Env, connections: usize, rounds: usize) -> Result<Vec<Point>, String> {
    let upstream = env.upstream()?;
    [Idle::Silent, Idle::AfterOneRequest]
        .into_iter()
        .map(|idle| measure(env, upstream.addr, connections, idle, rounds))
        .collect()
}
