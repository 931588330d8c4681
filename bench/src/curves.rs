//! The scaling curves: how latency and throughput move with the body size, the number of
//! connections, the number of routes, the number of stored tasks, and how many durable creates a
//! second the proxy sustains as clients are added. At each point the series are run one after
//! the other (alternation again), and a point that would overrun the budget is skipped, saying so.

use std::time::{Duration, Instant};

use crate::compare::{base, settle};
use crate::load::{Body, Generators, Load, Outcome};
use crate::plan::{Clock, Plan};
use crate::procs::{peak_rss_mib, Procs};
use crate::seed;
use crate::stack::{Env, Route, Running, DID, NV_ROUTE, PLAN, SUBJECT};
use crate::stats;

/// One row of a curve's table: a series at one x.
#[derive(Debug, Clone)]
pub struct Row {
    pub x: f64,
    pub series: String,
    pub metrics: Vec<(&'static str, Option<f64>)>,
}

impl Row {
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metrics
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| *v)
    }
}

/// A curve: its table and what its plot shows.
#[derive(Debug, Clone)]
pub struct Curve {
    /// File stem in the results directory.
    pub file: &'static str,
    pub title: String,
    pub x_label: &'static str,
    /// How an x value is written (`1 KiB`, `1000`).
    pub x_format: fn(f64) -> String,
    /// Metrics drawn, each with the y-axis label (one plot, one line per series and metric).
    pub plotted: Vec<&'static str>,
    pub y_label: &'static str,
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

/// A byte count in decimal units (`1 kB`, `100 kB`, `1 MB`), as the sizes are chosen.
pub fn format_bytes(x: f64) -> String {
    let (v, unit) = if x >= 1e6 {
        (x / 1e6, "MB")
    } else if x >= 1e3 {
        (x / 1e3, "kB")
    } else {
        (x, "B")
    };
    format!("{} {unit}", significant(v))
}

/// At most three significant digits, without trailing zeros.
fn significant(v: f64) -> String {
    let decimals = if v > 0.0 {
        (2.0 - v.abs().log10().floor()).clamp(0.0, 9.0) as usize
    } else {
        0
    };
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

pub fn format_count(x: f64) -> String {
    significant(x)
}

fn latency_metrics(o: &Outcome) -> Vec<(&'static str, Option<f64>)> {
    vec![
        ("req/s", Some(o.rps)),
        ("p50 ms", Some(o.p50_ms)),
        ("p99 ms", Some(o.p99_ms)),
        ("errors", Some(o.errors as f64)),
    ]
}

/// What the curves need from the running stack.
pub struct Targets<'a> {
    pub env: &'a Env,
    pub gens: &'a Generators,
    pub plan: &'a Plan,
    pub clock: &'a Clock,
    pub upstream: &'a Running,
    pub nginx: &'a Running,
    pub passthrough: &'a Running,
    pub full_get: &'a Running,
    pub full_create: &'a Running,
    /// A create contender on every CPU (the generator's too) and its worker threads: the
    /// durable-creates target names 2 cores.
    pub full_create_all_cpus: Option<(&'a Running, u32)>,
    pub rev_create: &'a Running,
    pub token: &'a str,
    /// The running tasks full get_task polls in turn.
    pub full_get_paths: &'a [String],
}

impl Targets<'_> {
    fn procs(&self) -> &Procs {
        &self.env.procs
    }

    fn wrk(&self, run: &Running, load: &Load, connections: u32) -> Option<Outcome> {
        let o = self
            .gens
            .wrk(
                self.procs(),
                &base(run.addr),
                load,
                connections,
                self.plan.curve_s,
            )
            .ok();
        let _ = settle(self.procs(), run.service.pid, false, self.plan.settle_max);
        o
    }

    /// A point costs about this much wall time.
    fn point(&self) -> Duration {
        Duration::from_secs(self.plan.curve_s + 1)
    }
}

fn json_body(prefix: &str, size: usize, suffix: &str) -> Body {
    Body::Filled {
        prefix: prefix.to_string(),
        fill: 'x',
        len: size.saturating_sub(prefix.len() + suffix.len()),
        suffix: suffix.to_string(),
    }
}

/// Latency against the JSON body's size, at one connection: the passthrough contenders echo the
/// body (it crosses the proxy both ways); the full pipeline creates a task whose query is the
/// body (read whole, parsed, translated, stored, sent on).
pub fn body_size(t: &Targets) -> Curve {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for &size in &t.plan.body_sizes {
        if !t.clock.fits(t.point() * 4) {
            notes.push(format!(
                "{} and larger: skipped (time budget)",
                format_bytes(size as f64)
            ));
            break;
        }
        let echo = Load::post("/echo", json_body("{\"data\":\"", size, "\"}"));
        let create = Load::post(
            format!("/api/v1/agents/{DID}/tasks"),
            json_body("{\"input_query\":\"", size, "\"}"),
        )
        .bearer(t.token);
        for (name, run, load) in [
            ("direct", t.upstream, &echo),
            ("nginx", t.nginx, &echo),
            ("interlingua passthrough", t.passthrough, &echo),
            ("interlingua full create", t.full_create, &create),
        ] {
            if let Some(o) = t.wrk(run, load, 1) {
                rows.push(Row {
                    x: size as f64,
                    series: name.to_string(),
                    metrics: latency_metrics(&o),
                });
            }
        }
    }
    Curve {
        file: "body_size",
        title: "Latency vs JSON body size (1 connection)".into(),
        x_label: "request body (bytes)",
        x_format: format_bytes,
        plotted: vec!["p50 ms", "p99 ms"],
        y_label: "latency (ms)",
        rows,
        notes,
    }
}

/// Latency and throughput against concurrent connections (closed loop).
pub fn connections(t: &Targets) -> Curve {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let pass = Load::get(format!(
        "/api/v1/agents/{DID}/tasks/{}",
        crate::canned::STATIC_TASK
    ));
    let full = Load::get("")
        .rotating(t.full_get_paths.to_vec())
        .bearer(t.token);
    for &c in &t.plan.connections {
        if !t.clock.fits(t.point() * 4) {
            notes.push(format!("{c} connections and more: skipped (time budget)"));
            break;
        }
        for (name, run, load) in [
            ("direct", t.upstream, &pass),
            ("nginx", t.nginx, &pass),
            ("interlingua passthrough", t.passthrough, &pass),
            ("interlingua full get_task", t.full_get, &full),
        ] {
            if let Some(o) = t.wrk(run, load, c) {
                rows.push(Row {
                    x: f64::from(c),
                    series: name.to_string(),
                    metrics: latency_metrics(&o),
                });
            }
        }
    }
    Curve {
        file: "connections",
        title: "Latency vs concurrent connections (closed loop)".into(),
        x_label: "connections",
        x_format: format_count,
        plotted: vec!["p50 ms", "p99 ms"],
        y_label: "latency (ms)",
        rows,
        notes,
    }
}

/// Latency against the number of routes: a fresh interlingua per point with N passthrough routes
/// (one per agent DID), asked for the last one declared.
pub fn routes(t: &Targets) -> Curve {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for &n in &t.plan.routes {
        if !t.clock.fits(t.point() * 2 + Duration::from_secs(5)) {
            notes.push(format!("{n} routes and more: skipped (time budget)"));
            break;
        }
        let routes: Vec<Route> = (0..n)
            .map(|i| Route::Passthrough {
                prefix: format!("/api/v1/agents/did:nv:r{i}"),
            })
            .collect();
        let name = format!("routes-{n}");
        let point = (|| -> Result<Row, String> {
            let config = t.env.interlingua_dir(&name, t.upstream.addr, &routes)?;
            let started = Instant::now();
            let run = t.env.serve(&name, &config, Duration::from_secs(120))?;
            let startup = started.elapsed().as_secs_f64();
            let load = Load::get(format!(
                "/api/v1/agents/did:nv:r{}/tasks/{}",
                n - 1,
                crate::canned::STATIC_TASK
            ));
            let o = t.gens.wrk(
                t.procs(),
                &base(run.addr),
                &load,
                t.plan.saturation_connections,
                t.plan.curve_s,
            )?;
            let rss = peak_rss_mib(run.service.pid, false);
            let mut metrics = latency_metrics(&o);
            metrics.push(("start-up s", Some(startup)));
            metrics.push(("peak RSS MiB", rss));
            Ok(Row {
                x: n as f64,
                series: "interlingua passthrough".into(),
                metrics,
            })
        })();
        match point {
            Ok(row) => rows.push(row),
            Err(e) => notes.push(format!("{n} routes: {e}")),
        }
    }
    Curve {
        file: "routes",
        title: format!(
            "Latency vs number of routes ({} connections)",
            t.plan.saturation_connections
        ),
        x_label: "routes",
        x_format: format_count,
        plotted: vec!["p50 ms", "p99 ms"],
        y_label: "latency (ms)",
        rows,
        notes,
    }
}

/// get_task against the number of tasks in the store: the store is seeded (finished tasks)
/// up to each point, interlingua restarted on it, and asked for the running task (store lookup
/// and a poll of the agent) and for random stored tasks (store only).
/// How many unfinished tasks the memory target names.
const UNFINISHED: u64 = 100_000;

/// Peak RSS of an interlingua restarted on a store of [`UNFINISHED`] unfinished tasks: its
/// watcher lists them all and follows each (the canned agent keeps them running), which is what
/// a proxy restarted in the middle of a busy day does.
fn unfinished_peak(t: &Targets) -> Result<Row, String> {
    let name = "unfinished-tasks";
    let routes = [Route::NeverminedOverMip {
        name: NV_ROUTE.into(),
        prefix: "/".into(),
    }];
    let config = t.env.interlingua_dir(name, t.upstream.addr, &routes)?;
    seed::seed_unfinished(
        &config.with_file_name("data"),
        NV_ROUTE,
        SUBJECT,
        PLAN,
        UNFINISHED,
    )?;
    let run = t.env.serve(name, &config, Duration::from_secs(60))?;
    let listed = "resuming unfinished tasks";
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&run.service.log)
        .unwrap_or_default()
        .contains(listed)
    {
        if Instant::now() > deadline {
            return Err(format!("interlingua never logged `{listed}`"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // A measurement window: the watcher's first rounds of polls, while every task is followed.
    std::thread::sleep(Duration::from_secs(t.plan.curve_s.max(2)));
    let peak = peak_rss_mib(run.service.pid, false);
    drop(run);
    Ok(Row {
        x: UNFINISHED as f64,
        series: "unfinished tasks, restarted (peak RSS only)".to_string(),
        metrics: vec![("peak RSS MiB", peak)],
    })
}

/// An interlingua on a store of the smallest size, measured just before each point of the
/// stored-tasks curve with the same load: a shared machine's speed drifts by as much as a fifth
/// between two runs a few seconds apart, so each point is also given as a ratio to this
/// reference, taken at the same moment (the flatness target is read from that ratio).
struct StoreReference {
    run: Running,
    running: Load,
    random: Load,
}

impl StoreReference {
    fn start(t: &Targets, routes: &[Route], n: u64) -> Result<StoreReference, String> {
        let name = "stored-tasks-reference";
        let config = t.env.interlingua_dir(name, t.upstream.addr, routes)?;
        t.env.grant(&config)?;
        seed::seed(&config.with_file_name("data"), NV_ROUTE, SUBJECT, PLAN, n)?;
        let run = t.env.serve(name, &config, Duration::from_secs(60))?;
        let running = Load::get(crate::polled::start_polled_task(&run, t.token)?).bearer(t.token);
        Ok(StoreReference {
            run,
            running,
            random: random_stored(t, n),
        })
    }
}

/// get_task of a random one of the first `n` seeded tasks.
fn random_stored(t: &Targets, n: u64) -> Load {
    let mut random = Load::get(format!("/api/v1/agents/{DID}/tasks/task-seed")).bearer(t.token);
    random.random_suffix = Some((n, seed::WIDTH));
    random
}

pub fn stored_tasks(t: &Targets) -> Curve {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let name = "stored-tasks";
    let result = (|| -> Result<(), String> {
        let routes = [Route::NeverminedOverMip {
            name: NV_ROUTE.into(),
            prefix: "/".into(),
        }];
        let smallest = t.plan.tasks.iter().copied().min().unwrap_or(0);
        let reference = StoreReference::start(t, &routes, smallest)?;
        notes.push(format!(
            "÷ ref: p50 over that of a second interlingua on a store of {smallest} tasks, measured with the same load just before each point (the machine's speed drifts over a run; the flatness target is read from this ratio)"
        ));
        let config = t.env.interlingua_dir(name, t.upstream.addr, &routes)?;
        // Credits for the one task created here (the running one every point polls).
        t.env.grant(&config)?;
        let data = config.with_file_name("data");
        let mut seed_rate: Option<f64> = None;
        let mut running_path: Option<String> = None;
        for &n in &t.plan.tasks {
            let have = seed::count(&data).unwrap_or(0);
            let need = Duration::from_secs_f64(
                seed_rate
                    .map(|r| (n.saturating_sub(have)) as f64 / r)
                    .unwrap_or(0.0),
            );
            if !t.clock.fits(need + t.point() * 4 + Duration::from_secs(10)) {
                notes.push(format!(
                    "{n} tasks and more: skipped (time budget; seeding would take about {:.0} s)",
                    need.as_secs_f64()
                ));
                break;
            }
            let (added, secs) = seed::seed(&data, NV_ROUTE, SUBJECT, PLAN, n)?;
            if added > 0 && secs > 0.0 {
                seed_rate = Some(added as f64 / secs);
            }
            let run = t.env.serve(name, &config, Duration::from_secs(60))?;
            let path = match &running_path {
                Some(p) => p.clone(),
                None => {
                    let p = crate::polled::start_polled_task(&run, t.token)?;
                    running_path = Some(p.clone());
                    p
                }
            };
            let running = Load::get(path).bearer(t.token);
            let random = random_stored(t, n);
            let db = std::fs::metadata(data.join("interlingua.db"))
                .map(|m| m.len() as f64 / 1048576.0)
                .ok();
            for (series, load, reference_load) in [
                (
                    "running task (store + agent poll)",
                    &running,
                    &reference.running,
                ),
                (
                    "random stored task (store only)",
                    &random,
                    &reference.random,
                ),
            ] {
                let measure = |on: &Running, load: &Load| {
                    t.gens.wrk(
                        t.procs(),
                        &base(on.addr),
                        load,
                        t.plan.saturation_connections,
                        t.plan.curve_s,
                    )
                };
                let before = measure(&reference.run, reference_load)?;
                let o = measure(&run, load)?;
                let mut metrics = latency_metrics(&o);
                metrics.push((
                    "÷ ref",
                    stats::median_ratio(&[Some(o.p50_ms)], &[Some(before.p50_ms)]),
                ));
                metrics.push(("peak RSS MiB", peak_rss_mib(run.service.pid, false)));
                metrics.push(("db MiB", db));
                metrics.push(("seed s", Some(secs)));
                rows.push(Row {
                    x: n as f64,
                    series: series.to_string(),
                    metrics,
                });
            }
            drop(run);
        }
        if t.plan.tasks.contains(&UNFINISHED) {
            rows.push(unfinished_peak(t)?);
        }
        Ok(())
    })();
    if let Err(e) = result {
        notes.push(format!("stopped: {e}"));
    }
    Curve {
        file: "stored_tasks",
        title: format!(
            "get_task latency vs stored tasks ({} connections)",
            t.plan.saturation_connections
        ),
        x_label: "tasks in the store",
        x_format: format_count,
        plotted: vec!["p50 ms", "p99 ms"],
        y_label: "latency (ms)",
        rows,
        notes,
    }
}

/// Durable creates a second against concurrent clients (closed loop), both directions.
pub fn creates(t: &Targets) -> Curve {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let nv = Load::post(
        format!("/api/v1/agents/{DID}/tasks"),
        Body::Text(r#"{"input_query":"a question for the agent"}"#.into()),
    )
    .bearer(t.token);
    let mip = Load::post(
        "/start_job",
        Body::Text(r#"{"identifier_from_purchaser":"0123456789abcdef","input_data":{"text":"a question for the agent"}}"#.into()),
    )
    .bearer(t.token);
    for &c in &t.plan.clients {
        if !t
            .clock
            .fits(t.point() * (2 + u32::from(t.full_create_all_cpus.is_some())))
        {
            notes.push(format!("{c} clients and more: skipped (time budget)"));
            break;
        }
        let wide = t.full_create_all_cpus.map(|(run, threads)| {
            (
                format!("Nevermined → MIP-003, all CPUs ({threads} threads)"),
                run,
                &nv,
            )
        });
        let series = [
            ("Nevermined → MIP-003".to_string(), t.full_create, &nv),
            ("MIP-003 → Nevermined".to_string(), t.rev_create, &mip),
        ];
        for (name, run, load) in series.into_iter().chain(wide) {
            if let Some(o) = t.wrk(run, load, c) {
                rows.push(Row {
                    x: f64::from(c),
                    series: name,
                    metrics: latency_metrics(&o),
                });
            }
        }
    }
    if t.full_create_all_cpus.is_some() {
        notes.push(
            "all CPUs: interlingua on the generator's CPUs and the contenders' (a worker thread each), sharing them with the load generator and the upstream; the other series have one CPU, shared with the upstream".into(),
        );
    }
    Curve {
        file: "creates",
        title: "Durable creates per second vs concurrent clients".into(),
        x_label: "concurrent clients",
        x_format: format_count,
        plotted: vec!["req/s"],
        y_label: "creates/s",
        rows,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_values_are_written_short() {
        assert_eq!(format_bytes(1000.0), "1 kB");
        assert_eq!(format_bytes(1_000_000.0), "1 MB");
        assert_eq!(format_bytes(31_622.0), "31.6 kB");
        assert_eq!(format_count(10_000.0), "10000");
        assert_eq!(format_count(3.0), "3");
        assert_eq!(format_count(0.05), "0.05");
        assert_eq!(format_count(0.00123), "0.00123");
    }
}
