//! Instructions per request, counted by valgrind's callgrind: the regression guard CI runs.
//!
//! Throughput and CPU time drift with the host (these machines are shared, and their hardware
//! counters are not exposed: `perf stat -e instructions` answers "not supported"). callgrind
//! counts the instructions the process executes by simulating it, so the same binary given the
//! same requests counts (nearly) the same whatever else the machine does. Each contender is one
//! interlingua under callgrind in front of the canned upstream; one client sends `warmup`
//! requests on one kept-alive connection, the counters are zeroed (`callgrind_control -z`), the
//! client sends `requests` more, and the counters are dumped (`callgrind_control -d`). A create's
//! work includes the watcher's later poll that ends its task (capture and release): the dump
//! waits until every create measured has been charged.
//!
//! What is left that varies between runs is small (hash seeds, how many wake-ups a request
//! takes): a few per cent. [`check`] compares against a committed baseline with a margin well
//! above that, so a change that costs a sixth more fails CI with its figure.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::canned::{KEEP_RUNNING, STATIC_TASK};
use crate::http::{Conn, Request};
use crate::procs::Service;
use crate::stack::{Env, Route, Running, DID, NV_ROUTE};

/// The requests the counts are taken over, the ones before (caches filled, pools opened), and
/// where the callgrind dumps are kept (`callgrind.<kind>.out`, for `callgrind_annotate`).
#[derive(Debug, Clone)]
pub struct Sizes {
    pub warmup: usize,
    pub requests: usize,
    pub dumps: Option<PathBuf>,
}

/// One measured request kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `GET` of a 1.2 kB Nevermined task on a passthrough route.
    Passthrough,
    /// Nevermined get_task of a running task over a MIP-003 agent (every poll reaches it).
    FullGet,
    /// Nevermined create over a MIP-003 agent, with its hold, and the watcher's poll that ends
    /// it with a capture and a release.
    FullCreate,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Passthrough, Kind::FullGet, Kind::FullCreate];

    /// The name in the baseline file and the printed line.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Passthrough => "passthrough",
            Kind::FullGet => "full_get",
            Kind::FullCreate => "full_create",
        }
    }
}

/// Instructions per request of one kind.
#[derive(Debug, Clone, Copy)]
pub struct Figure {
    pub kind: Kind,
    pub per_request: f64,
}

/// Counts every kind in turn, each on its own interlingua under callgrind.
pub fn measure(env: &Env, sizes: &Sizes) -> Result<Vec<Figure>, String> {
    let upstream = env.upstream()?;
    Kind::ALL
        .iter()
        .map(|&kind| {
            let per_request = count(env, upstream.addr, kind, sizes)?;
            eprintln!(
                "instructions: {} {:.0} per request",
                kind.name(),
                per_request
            );
            Ok(Figure { kind, per_request })
        })
        .collect()
}

/// The line the bench prints: `instructions passthrough=N full_get=N full_create=N`.
pub fn line(figures: &[Figure]) -> String {
    let mut s = "instructions".to_string();
    for f in figures {
        let _ = write!(s, " {}={:.0}", f.kind.name(), f.per_request);
    }
    s
}

fn count(env: &Env, upstream: SocketAddr, kind: Kind, sizes: &Sizes) -> Result<f64, String> {
    let name = format!("callgrind-{}", kind.name());
    let route = match kind {
        Kind::Passthrough => Route::Passthrough { prefix: "/".into() },
        Kind::FullGet | Kind::FullCreate => Route::NeverminedOverMip {
            name: NV_ROUTE.into(),
            prefix: "/".into(),
        },
    };
    let config = env.interlingua_dir(&name, upstream, &[route])?;
    let token = match kind {
        Kind::Passthrough => None,
        _ => {
            env.grant(&config)?;
            Some(env.token(&config)?)
        }
    };
    let out = config.with_file_name("callgrind.out");
    let wrapper = [
        "valgrind".to_string(),
        "--tool=callgrind".into(),
        format!("--callgrind-out-file={}", out.display()),
        // The process's own threads only: no cache simulation, no per-line positions to dump.
        "--dump-line=no".into(),
    ];
    // Under callgrind everything runs some fifty times slower, the start-up included.
    let run = env.serve_under(&name, &config, Duration::from_secs(300), &wrapper)?;
    let mut conn = Conn::open(run.addr, Duration::from_secs(60))?;
    let request = match (kind, &token) {
        (Kind::Passthrough, _) => Request::get(format!("/api/v1/agents/{DID}/tasks/{STATIC_TASK}")),
        (Kind::FullGet, Some(t)) => Request::get(polled_task(&mut conn, t)?).bearer(t),
        (_, t) => Request::post(
            format!("/api/v1/agents/{DID}/tasks"),
            r#"{"input_query":"count me"}"#,
        )
        .bearer(t.as_deref().unwrap_or_default()),
    };
    let expected = if kind == Kind::FullCreate { 201 } else { 200 };
    let send = |conn: &mut Conn, n: usize| -> Result<(), String> {
        for _ in 0..n {
            let a = conn.send(&request)?;
            if a.status != expected {
                return Err(format!(
                    "{name}: {} {} answered {} (expected {expected}): {}",
                    request.method,
                    request.path,
                    a.status,
                    a.body.chars().take(300).collect::<String>()
                ));
            }
        }
        Ok(())
    };
    send(&mut conn, sizes.warmup)?;
    let admin = admin_addr(&run)?;
    if kind == Kind::FullCreate {
        settled(admin, sizes.warmup)?;
    }
    control(&run.service, "-z")?;
    send(&mut conn, sizes.requests)?;
    if kind == Kind::FullCreate {
        settled(admin, sizes.warmup + sizes.requests)?;
    }
    control(&run.service, "-d")?;
    drop(conn);
    drop(run);
    let dump = PathBuf::from(format!("{}.1", out.display()));
    let total = totals(&dump)?;
    if let Some(dir) = &sizes.dumps {
        let kept = dir.join(format!("callgrind.{}.out", kind.name()));
        std::fs::create_dir_all(dir)
            .and_then(|_| std::fs::copy(&dump, &kept))
            .map_err(|e| format!("{}: {e}", kept.display()))?;
    }
    Ok(total as f64 / sizes.requests as f64)
}

/// Creates a task that stays running; returns the path its get_task polls.
fn polled_task(conn: &mut Conn, token: &str) -> Result<String, String> {
    let a = conn.send(
        &Request::post(
            format!("/api/v1/agents/{DID}/tasks"),
            format!(r#"{{"input_query":"{KEEP_RUNNING}"}}"#),
        )
        .bearer(token),
    )?;
    let v: Value = serde_json::from_str(&a.body).map_err(|e| format!("create answer: {e}"))?;
    let id = v["task"]["task_id"].as_str().ok_or_else(|| {
        format!(
            "the create answered {} without a task id: {}",
            a.status, a.body
        )
    })?;
    Ok(format!("/api/v1/agents/{DID}/tasks/{id}"))
}

fn admin_addr(run: &Running) -> Result<SocketAddr, String> {
    run.admin
        .ok_or_else(|| "interlingua's ready line named no admin address".to_string())
}

/// Waits until `n` credits have been captured: with the route's one credit held and captured per
/// task, every create measured has ended and settled.
fn settled(admin: SocketAddr, n: usize) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let metrics = Request::get("/metrics").send(admin, Duration::from_secs(30))?;
        let captured = metrics
            .body
            .lines()
            .find(|l| l.starts_with("interlingua_credits_total{kind=\"captured\"}"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        if captured >= n as f64 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{captured} of {n} created tasks were settled within 120 s"
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `callgrind_control OPTION PID`: zeroes (`-z`) or dumps (`-d`) the counters, synchronously.
fn control(service: &Service, option: &str) -> Result<(), String> {
    let out = Command::new("callgrind_control")
        .arg(option)
        .arg(service.pid.to_string())
        .output()
        .map_err(|e| format!("callgrind_control: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !text.contains("OK") {
        return Err(format!(
            "callgrind_control {option} {} failed: {text}{}",
            service.pid,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// The `totals:` line of a callgrind dump: instructions executed since the counters were zeroed.
fn totals(dump: &Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(dump).map_err(|e| format!("{}: {e}", dump.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("totals:"))
        // Instructions (`Ir`) come first, whatever other events a run counts besides.
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("{}: no totals line", dump.display()))
}

/// A committed baseline: `NAME INSTRUCTIONS` lines (`#` starts a comment).
pub fn read_baseline(text: &str) -> Result<Vec<(String, f64)>, String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut it = l.split_whitespace();
            match (
                it.next(),
                it.next().and_then(|v| v.parse::<f64>().ok()),
                it.next(),
            ) {
                (Some(name), Some(v), None) => Ok((name.to_string(), v)),
                _ => Err(format!("baseline line `{l}`: expected `NAME INSTRUCTIONS`")),
            }
        })
        .collect()
}

/// Compares `figures` with `baseline`: an error naming every kind more than `margin` (0.15 =
/// 15 %) above its baseline, or missing from it. Far below is only reported (a cheaper build
/// should lower the baseline, so the margin keeps guarding).
pub fn check(
    figures: &[Figure],
    baseline: &[(String, f64)],
    margin: f64,
) -> Result<String, String> {
    let mut report = String::new();
    let mut over = Vec::new();
    for f in figures {
        let Some((_, base)) = baseline.iter().find(|(n, _)| n == f.kind.name()) else {
            over.push(format!("{}: not in the baseline", f.kind.name()));
            continue;
        };
        let ratio = f.per_request / base;
        let _ = writeln!(
            report,
            "{:<12} {:>10.0} per request, baseline {:>10.0}: x{ratio:.3}",
            f.kind.name(),
            f.per_request,
            base
        );
        if ratio > 1.0 + margin {
            over.push(format!(
                "{} costs {:.0} instructions per request, {:+.1} % over its baseline {:.0} (allowed: +{:.0} %)",
                f.kind.name(),
                f.per_request,
                (ratio - 1.0) * 100.0,
                base,
                margin * 100.0
            ));
        } else if ratio < 1.0 - margin {
            let _ = writeln!(
                report,
                "  {} is {:.1} % under its baseline: lower the baseline to keep the guard tight",
                f.kind.name(),
                (1.0 - ratio) * 100.0
            );
        }
    }
    if over.is_empty() {
        Ok(report)
    } else {
        Err(format!("{report}{}", over.join("\n")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(kind: Kind, per_request: f64) -> Figure {
        Figure { kind, per_request }
    }

    #[test]
    fn baselines_read_name_and_count_and_skip_comments() {
        let b = read_baseline("# comment\npassthrough 1000 # why\n\nfull_get 2e4\n").unwrap();
        assert_eq!(
            b,
            vec![
                ("passthrough".to_string(), 1000.0),
                ("full_get".to_string(), 20000.0)
            ]
        );
        assert!(read_baseline("passthrough lots").is_err());
        assert!(read_baseline("passthrough 1 2").is_err());
    }

    #[test]
    fn a_kind_over_its_margin_fails_with_its_figure() {
        let base = vec![("passthrough".into(), 100.0), ("full_get".into(), 1000.0)];
        assert!(check(&[fig(Kind::Passthrough, 114.0)], &base, 0.15).is_ok());
        let err = check(
            &[fig(Kind::Passthrough, 100.0), fig(Kind::FullGet, 1300.0)],
            &base,
            0.15,
        )
        .unwrap_err();
        assert!(err.contains("full_get costs 1300"), "{err}");
        assert!(err.contains("+30.0 %"), "{err}");
        assert!(check(&[fig(Kind::FullCreate, 1.0)], &base, 0.15)
            .unwrap_err()
            .contains("not in the baseline"));
        let under = check(&[fig(Kind::FullGet, 500.0)], &base, 0.15).unwrap();
        assert!(under.contains("lower the baseline"), "{under}");
    }
}
