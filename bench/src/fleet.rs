//! PostgreSQL in the benchmark: durable creates and get_task with the store on PostgreSQL beside
//! the same on SQLite (two more contenders of the main table), and one instance against two on
//! the same database (this section's own table), with the CPU each create costs interlingua and
//! PostgreSQL, from which a bigger machine's figure is projected.
//!
//! PostgreSQL runs on the contenders' CPUs (its postmaster pinned there, and every backend it
//! forks inherits the pinning), with its default durability (`fsync`, `synchronous_commit`): a
//! create answered 201 is on disk, as SQLite's `synchronous = FULL` makes it.

use std::thread;

use crate::compare::{base, settle};
use crate::load::{Generators, Load};
use crate::plan::Plan;
use crate::procs::Procs;
use crate::report::{fmt, Table};
use crate::stack::{Env, Route, Running};
use crate::stats::{median_of, relative_spread};

/// A PostgreSQL cluster for the run, stopped when dropped.
pub struct Postgres {
    server: testkit::postgres::Postgres,
    /// The postmaster, whose direct children are every backend.
    pid: u32,
}

impl Postgres {
    /// Starts a durable cluster and pins it to `cpus` (when the run pins).
    pub fn start(procs: &Procs, cpus: &str) -> Result<Postgres, String> {
        let server = testkit::postgres::Postgres::durable();
        // The first line of the data directory's `postmaster.pid` is the postmaster's pid.
        let pid_file = server.dir().join("data").join("postmaster.pid");
        let pid: u32 = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()))
            .ok_or_else(|| format!("no postmaster pid in {}", pid_file.display()))?;
        if procs.pins() {
            let pid = pid.to_string();
            // `-a`: the postmaster's threads and the processes it has forked so far; backends
            // forked later inherit its affinity.
            let out = std::process::Command::new("taskset")
                .args(["-a", "-p", "-c", cpus, &pid])
                .output()
                .map_err(|e| format!("taskset: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "cannot pin PostgreSQL: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        Ok(Postgres { server, pid })
    }

    /// A fresh database's URL.
    pub fn database(&self, name: &str) -> String {
        self.server.database(name)
    }

    /// The postmaster, whose direct children are every backend.
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

/// One instance against two on one database, per round.
pub struct Scaling {
    pub one_rps: Vec<Option<f64>>,
    pub two_rps: Vec<Option<f64>>,
    /// CPU milliseconds per create: interlingua's (all instances), PostgreSQL's.
    pub one_cpu_ms: Vec<Option<(f64, f64)>>,
    pub two_cpu_ms: Vec<Option<(f64, f64)>>,
}

/// Runs `rounds` of: creates against one instance (all connections), then against two at once
/// (half the connections each, two generators), on the same database.
#[allow(clippy::too_many_arguments)]
pub fn scaling(
    procs: &Procs,
    gens: &Generators,
    plan: &Plan,
    pg: &Postgres,
    a: &Running,
    b: &Running,
    load: &Load,
    log: &mut dyn FnMut(&str),
) -> Scaling {
    let mut s = Scaling {
        one_rps: Vec::new(),
        two_rps: Vec::new(),
        one_cpu_ms: Vec::new(),
        two_cpu_ms: Vec::new(),
    };
    let conns = plan.saturation_connections;
    let cpu = |pids: &[u32]| -> (f64, f64) {
        let proxy: f64 = pids.iter().map(|p| procs.cpu_seconds(*p, false)).sum();
        (proxy, procs.cpu_seconds(pg.pid(), true))
    };
    let quiet = |pids: &[u32]| {
        for p in pids {
            settle(procs, *p, false, plan.settle_max);
        }
        settle(procs, pg.pid(), true, plan.settle_max);
    };
    let per_create = |before: (f64, f64), after: (f64, f64), creates: u64| {
        (creates > 0).then(|| {
            let n = creates as f64;
            (
                (after.0 - before.0) * 1000.0 / n,
                (after.1 - before.1) * 1000.0 / n,
            )
        })
    };
    for round in 0..plan.rounds {
        let pids = [a.service.pid];
        let before = cpu(&pids);
        let one = gens.wrk(procs, &base(a.addr), load, conns, plan.saturation_s);
        quiet(&pids);
        let after = cpu(&pids);
        match one {
            Ok(o) => {
                log(&format!(
                    "  round {} PostgreSQL, one instance   {:>9.0} creates/s  errors {}",
                    round + 1,
                    o.rps,
                    o.errors
                ));
                s.one_rps.push(Some(o.rps));
                s.one_cpu_ms.push(per_create(before, after, o.requests));
            }
            Err(e) => {
                log(&format!(
                    "  round {} PostgreSQL, one instance: {e}",
                    round + 1
                ));
                s.one_rps.push(None);
                s.one_cpu_ms.push(None);
            }
        }

        let pids = [a.service.pid, b.service.pid];
        let before = cpu(&pids);
        let (ra, rb) = thread::scope(|scope| {
            let other =
                scope.spawn(|| gens.wrk(procs, &base(b.addr), load, conns / 2, plan.saturation_s));
            let mine = gens.wrk(procs, &base(a.addr), load, conns / 2, plan.saturation_s);
            let theirs = other
                .join()
                .unwrap_or_else(|_| Err("the second generator panicked".into()));
            (mine, theirs)
        });
        quiet(&pids);
        let after = cpu(&pids);
        match (ra, rb) {
            (Ok(x), Ok(y)) => {
                log(&format!(
                    "  round {} PostgreSQL, two instances  {:>9.0} creates/s  errors {}",
                    round + 1,
                    x.rps + y.rps,
                    x.errors + y.errors
                ));
                s.two_rps.push(Some(x.rps + y.rps));
                s.two_cpu_ms
                    .push(per_create(before, after, x.requests + y.requests));
            }
            (Err(e), _) | (_, Err(e)) => {
                log(&format!(
                    "  round {} PostgreSQL, two instances: {e}",
                    round + 1
                ));
                s.two_rps.push(None);
                s.two_cpu_ms.push(None);
            }
        }
    }
    s
}

impl Scaling {
    /// Two instances' creates/s ÷ one's (the median of the per-round ratios).
    pub fn two_over_one(&self) -> Option<f64> {
        crate::stats::median_ratio(&self.two_rps, &self.one_rps)
    }

    fn cpu(v: &[Option<(f64, f64)>]) -> (Option<f64>, Option<f64>) {
        let proxy: Vec<Option<f64>> = v.iter().map(|c| c.map(|c| c.0)).collect();
        let pg: Vec<Option<f64>> = v.iter().map(|c| c.map(|c| c.1)).collect();
        (median_of(&proxy), median_of(&pg))
    }

    pub fn table(&self) -> Table {
        let mut t = Table::new(&[
            "PostgreSQL store",
            "creates/s",
            "spread",
            "interlingua CPU ms/create",
            "PostgreSQL CPU ms/create",
        ]);
        for (label, rps, cpu) in [
            ("one instance", &self.one_rps, &self.one_cpu_ms),
            (
                "two instances, one database",
                &self.two_rps,
                &self.two_cpu_ms,
            ),
        ] {
            let (proxy, pg) = Scaling::cpu(cpu);
            t.rows.push(vec![
                label.to_string(),
                fmt(median_of(rps), 0),
                relative_spread(rps)
                    .map(|s| format!("±{:.0}%", s * 50.0))
                    .unwrap_or_else(|| "–".into()),
                fmt(proxy, 3),
                fmt(pg, 3),
            ]);
        }
        t
    }

    /// What limits two instances here, and what a bigger machine would reach with the CPU per
    /// create measured.
    pub fn projection(&self, sut_cpus: u32) -> String {
        let (Some(proxy), Some(pg)) = Scaling::cpu(&self.one_cpu_ms) else {
            return "no projection: the one-instance runs failed".into();
        };
        let per_core = 1000.0 / proxy;
        let pg_core = 1000.0 / pg;
        format!(
            "two instances ÷ one: {} (both instances, PostgreSQL and the upstream share {sut_cpus} CPU(s) here, so a second instance adds no CPU: the ratio says what the split costs, not what scale buys). \
             Measured per create: interlingua {proxy:.3} ms CPU, PostgreSQL {pg:.3} ms. Projection: each instance on a core of its own makes ≈ {per_core:.0} creates/s; \
             PostgreSQL makes ≈ {pg_core:.0}/s per core of its own (before its disk's fsyncs bind). On 8 cores with 2 instances and 2 cores for PostgreSQL: ≈ {:.0}/s \
             (two ÷ one ≈ {:.2}); with 6 instances and 2 for PostgreSQL: ≈ {:.0}/s",
            fmt(self.two_over_one(), 2),
            (2.0 * per_core).min(2.0 * pg_core),
            (2.0 * per_core).min(2.0 * pg_core) / per_core.min(2.0 * pg_core),
            (6.0 * per_core).min(2.0 * pg_core),
        )
    }
}

/// A full-create route's interlingua on `url`'s database (its own config directory).
pub fn serve_on(
    env: &Env,
    name: &str,
    url: &str,
    route: Route,
    upstream: std::net::SocketAddr,
) -> Result<Running, String> {
    let pg_env = Env {
        store_url: Some(url.to_string()),
        ..env.clone()
    };
    let config = pg_env.interlingua_dir(name, upstream, &[route])?;
    pg_env.grant(&config)?;
    pg_env.serve(name, &config, std::time::Duration::from_secs(30))
}
