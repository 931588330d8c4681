//! `interlingua-bench run`: starts every contender, checks each answers as it should, runs the
//! comparison and the curves, writes the results, and prints the table with the headline as the
//! last line. Every process it starts is stopped on the way out, on a signal, and when the hard
//! time limit is reached.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::canned::STATIC_TASK;
use crate::compare::{self, Contender};
use crate::curves::{self, Curve, Targets};
use crate::load::{Body, Generators, Load};
use crate::payer::Payer;
use crate::plan::{Clock, Plan};
use crate::polled::{start_polled_job, start_polled_task};
use crate::procs::Procs;
use crate::report::{self, Headline};
use crate::stack::{Env, Route, Running, DID, MIP_ROUTE, NV_ROUTE, PAID_ROUTE, SECRET_ENV};

/// What `run` is told. A later option overrides an earlier one (so `bench/run --interlingua X`
/// replaces the binary `bench/run` names by default).
#[derive(Debug, Clone, clap::Args)]
#[command(args_override_self = true)]
pub struct RunArgs {
    /// The smoke run CI calls: every contender and curve, a few seconds each (under three
    /// minutes).
    #[arg(long)]
    pub quick: bool,
    /// The repository (for `mappings/` and the default results directory).
    #[arg(long)]
    pub repo: PathBuf,
    /// The release `interlingua` binary.
    #[arg(long)]
    pub interlingua: PathBuf,
    #[arg(long, default_value = "wrk")]
    pub wrk: PathBuf,
    #[arg(long, default_value = "oha")]
    pub oha: PathBuf,
    #[arg(long, default_value = "nginx")]
    pub nginx: PathBuf,
    /// Where results go; default `bench/results` (full) or `bench/results/quick`.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where the pids of started processes are written (one `PID STARTTIME NAME` a line).
    #[arg(long)]
    pub pidfile: Option<PathBuf>,
    /// CPUs of the load generator (a `taskset` list).
    #[arg(long, default_value = "0")]
    pub generator_cpus: String,
    /// CPUs of the contenders, the upstream and the x402 facilitator.
    #[arg(long, default_value = "1")]
    pub sut_cpus: String,
    /// Do not pin processes to CPUs.
    #[arg(long)]
    pub no_pin: bool,
    /// Keep the run's scratch directory (configs, logs, stores).
    #[arg(long)]
    pub keep: bool,
    /// Another `interlingua` binary (e.g. built from the commit before an optimisation): its
    /// passthrough, full get_task and full create join the comparison, alternating with this
    /// build's, and a "this build ÷ baseline" table pairs them round by round.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Rounds of the comparison (default: 2 quick, 5 full).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Only the comparison: no scaling curves (a before/after check of one change).
    #[arg(long)]
    pub skip_curves: bool,
}

fn say(clock: &Clock, msg: &str) {
    eprintln!("[{:>6.1}s] {msg}", clock.elapsed().as_secs_f64());
}

fn cpu_count(list: &str) -> u32 {
    list.split(',')
        .map(|part| match part.split_once('-') {
            Some((a, b)) => {
                b.trim()
                    .parse::<u32>()
                    .unwrap_or(0)
                    .saturating_sub(a.trim().parse().unwrap_or(0))
                    + 1
            }
            None => 1,
        })
        .sum::<u32>()
        .max(1)
}

/// The running tasks each get_task contender polls in turn: as many as the saturation pass's
/// connections, so that concurrent polls are of different tasks and each reaches the agent (64
/// polls of one task would wait on its refresh gate and share its refreshes: that measures the
/// coalescing, not the pipeline).
const POLLED_TASKS: usize = 64;

/// [`POLLED_TASKS`] tasks made by `start` (one of [`polled`]'s); their paths.
fn polled_paths(
    start: fn(&Running, &str) -> Result<String, String>,
    run: &Running,
    token: &str,
) -> Result<Vec<String>, String> {
    (0..POLLED_TASKS).map(|_| start(run, token)).collect()
}

/// One request to a contender must answer `status` with a body containing `needle`.
fn check(c: &Contender, status: u16, needle: &str) -> Result<(), String> {
    let a = c.load.one().send(c.addr, Duration::from_secs(10))?;
    if a.status != status || !a.body.contains(needle) {
        return Err(format!(
            "{} answered {} (expected {status} containing `{needle}`): {}",
            c.label,
            a.status,
            a.body.chars().take(400).collect::<String>()
        ));
    }
    Ok(())
}

/// What the facilitator saw for the paid contender: each payment verified once and settled
/// once, and at least one settlement for every paid create answered 2xx in the saturation runs
/// (a paid create's answer waits for its settlement).
fn x402_check(
    c: &compare::Comparison,
    facilitator: &Running,
) -> Result<crate::facilitator::Counts, String> {
    let counts = crate::facilitator::counts(facilitator.addr)?;
    if let Some(problem) = counts.problem() {
        return Err(format!("x402: {problem}; {}", counts.line()));
    }
    let answered = c.get("x402_create").map_or(0, |m| m.answered_ok());
    if counts.settle < answered {
        return Err(format!(
            "x402: {answered} paid creates answered 2xx, the facilitator settled {}; {}",
            counts.settle,
            counts.line()
        ));
    }
    Ok(counts)
}

/// Stops everything on SIGINT or SIGTERM, and when the hard limit passes.
fn guard(procs: Arc<Procs>, scratch: PathBuf, keep: bool, hard: Duration) {
    let p = procs.clone();
    let dir = scratch.clone();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async {
            let Ok(mut term) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            else {
                return;
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        });
        eprintln!("bench: interrupted; stopping every process it started");
        p.stop_all();
        if !keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
        std::process::exit(130);
    });
    std::thread::spawn(move || {
        std::thread::sleep(hard);
        eprintln!(
            "bench: the hard time limit ({} s) passed; stopping every process it started",
            hard.as_secs()
        );
        procs.stop_all();
        if !keep {
            let _ = std::fs::remove_dir_all(&scratch);
        }
        std::process::exit(3);
    });
}

/// Runs the benchmark; an error fails the run (non-zero exit).
pub fn run(args: RunArgs) -> Result<(), String> {
    let mut plan = Plan::new(args.quick);
    if let Some(r) = args.rounds {
        plan.rounds = r.max(1);
    }
    // More rounds or a baseline's contenders take longer than the plan's limits allow.
    let longer = args.rounds.is_some() || args.baseline.is_some();
    let contenders = if args.baseline.is_some() { 11.0 } else { 8.0 };
    let per_round = plan.saturation_s as f64
        + plan.rate_s
        + 3.0
        + plan.settle_max.as_secs_f64() * 2.0 / contenders;
    let comparison = Duration::from_secs_f64(contenders * plan.rounds as f64 * per_round);
    let curves = if args.skip_curves {
        Duration::ZERO
    } else {
        plan.budget.mul_f64(0.4)
    };
    if longer {
        plan.budget = plan.budget.max(comparison + curves);
        plan.hard_limit = plan.hard_limit.max(plan.budget + Duration::from_secs(120));
    }
    let clock = Clock::new(plan.budget);
    let scratch = std::env::temp_dir().join(format!("interlingua-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let pidfile = args.pidfile.clone().unwrap_or_else(|| scratch.join("pids"));
    let procs =
        Procs::new(&pidfile, !args.no_pin).map_err(|e| format!("{}: {e}", pidfile.display()))?;
    guard(procs.clone(), scratch.clone(), args.keep, plan.hard_limit);
    let result = run_in(&args, &plan, &clock, &procs, &scratch);
    procs.stop_all();
    if args.keep {
        eprintln!("scratch directory kept: {}", scratch.display());
    } else {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    result
}

fn run_in(
    args: &RunArgs,
    plan: &Plan,
    clock: &Clock,
    procs: &Arc<Procs>,
    scratch: &Path,
) -> Result<(), String> {
    let machine = report::machine();
    say(clock, &format!("{} run on {machine}", plan.name()));
    // The bench key's secret: any string; every interlingua process and CLI call inherits it.
    std::env::set_var(
        SECRET_ENV,
        format!(
            "bench-secret-{}-{}",
            std::process::id(),
            chrono::Utc::now().timestamp()
        ),
    );
    let threads = cpu_count(&args.sut_cpus);
    let env = Env {
        procs: procs.clone(),
        dir: scratch.to_path_buf(),
        repo: args.repo.clone(),
        interlingua: args.interlingua.clone(),
        nginx: args.nginx.clone(),
        me: std::env::current_exe().map_err(|e| e.to_string())?,
        sut_cpus: args.sut_cpus.clone(),
        threads,
        store_url: None,
    };
    let gens_dir = scratch.join("load");
    std::fs::create_dir_all(&gens_dir).map_err(|e| e.to_string())?;
    let gens = Generators {
        wrk: args.wrk.clone(),
        oha: args.oha.clone(),
        cpus: args.generator_cpus.clone(),
        dir: gens_dir,
    };
    say(clock, &format!(
        "pinning: generator on CPU {}, contenders and upstream on CPU {} ({threads} worker thread(s) each){}",
        args.generator_cpus,
        args.sut_cpus,
        if args.no_pin { " — pinning off" } else { "" }
    ));

    // The stack.
    let upstream = env.upstream()?;
    let nginx = env.nginx(upstream.addr)?;
    let start = |name: &str, route: Route, credits: bool| -> Result<(Running, PathBuf), String> {
        let config = env.interlingua_dir(name, upstream.addr, &[route])?;
        if credits {
            env.grant(&config)?;
        }
        Ok((env.serve(name, &config, Duration::from_secs(30))?, config))
    };
    let nv = || Route::NeverminedOverMip {
        name: NV_ROUTE.into(),
        prefix: "/".into(),
    };
    let mip = || Route::MipOverNevermined {
        name: MIP_ROUTE.into(),
        prefix: "/".into(),
    };
    let (pass, _) = start(
        "passthrough",
        Route::Passthrough { prefix: "/".into() },
        false,
    )?;
    let (full_get, config) = start("full-get", nv(), true)?;
    let (full_create, _) = start("full-create", nv(), true)?;
    let (rev_get, _) = start("rev-get", mip(), true)?;
    let (rev_create, _) = start("rev-create", mip(), true)?;
    // The full create again, paid with x402 instead of a token: verified and settled by a
    // stand-in facilitator; the payer's credits come from each payment (no grant).
    let facilitator = env.facilitator()?;
    let (paid_create, _) = start(
        "paid-create",
        Route::PaidNeverminedOverMip {
            name: PAID_ROUTE.into(),
            prefix: "/".into(),
            facilitator: facilitator.addr,
        },
        false,
    )?;
    // The same two full-pipeline contenders with the store on PostgreSQL (each its own
    // database), and two instances sharing one database for the scaling section.
    let pg = crate::fleet::Postgres::start(procs, &args.sut_cpus)?;
    let on_pg =
        |name: &str, url: &str| crate::fleet::serve_on(&env, name, url, nv(), upstream.addr);
    let pg_get = on_pg("pg-full-get", &pg.database("full_get"))?;
    let pg_create = on_pg("pg-full-create", &pg.database("full_create"))?;
    let shared = pg.database("scale");
    let pg_a = on_pg("pg-scale-a", &shared)?;
    let pg_b = on_pg("pg-scale-b", &shared)?;
    let token = env.token(&config)?;
    let polled_tasks = polled_paths(start_polled_task, &full_get, &token)?;
    let pg_polled = polled_paths(start_polled_task, &pg_get, &token)?;
    let polled_job = polled_paths(start_polled_job, &rev_get, &token)?;
    say(clock, &format!(
        "started: upstream {}, nginx {}, interlingua passthrough {}, full get {}, full create {}, reverse get {}, reverse create {}, paid create {} (facilitator {})",
        upstream.addr, nginx.addr, pass.addr, full_get.addr, full_create.addr, rev_get.addr, rev_create.addr, paid_create.addr, facilitator.addr
    ));

    let static_get = Load::get(format!("/api/v1/agents/{DID}/tasks/{STATIC_TASK}"));
    let unsigned_create = Load::post(
        format!("/api/v1/agents/{DID}/tasks"),
        Body::Text(r#"{"input_query":"a question for the agent"}"#.into()),
    );
    let nv_create = unsigned_create.clone().bearer(&token);
    // The same create, paid instead of signed. A day is longer than any run: interlingua reads
    // `validBefore` as the sale's deadline.
    let payer = Payer::new(
        &format!("http://{}{}", paid_create.addr, unsigned_create.path),
        chrono::Utc::now().timestamp() + 86_400,
    );
    let paid_load = unsigned_create.paid(Arc::new(payer));
    let mip_create = Load::post(
        "/start_job",
        Body::Text(r#"{"identifier_from_purchaser":"0123456789abcdef","input_data":{"text":"a question for the agent"}}"#.into()),
    )
    .bearer(&token);
    let contender = |key, label, run: &Running, load: Load, tree, lingers| Contender {
        key,
        label,
        addr: run.addr,
        load,
        pid: run.service.pid,
        tree,
        lingers,
        facilitator: None,
    };
    let contenders = vec![
        contender(
            "direct",
            "direct (the limit)",
            &upstream,
            static_get.clone(),
            false,
            false,
        ),
        contender("nginx", "nginx", &nginx, static_get.clone(), true, false),
        contender(
            "passthrough",
            "interlingua passthrough",
            &pass,
            static_get.clone(),
            false,
            false,
        ),
        contender(
            "full_get",
            "full get_task NVM→MIP",
            &full_get,
            Load::get("").rotating(polled_tasks.clone()).bearer(&token),
            false,
            false,
        ),
        contender(
            "full_create",
            "full create NVM→MIP",
            &full_create,
            nv_create.clone(),
            false,
            true,
        ),
        Contender {
            facilitator: Some(facilitator.service.pid),
            ..contender(
                "x402_create",
                "paid create (x402 exact) NVM→MIP",
                &paid_create,
                paid_load,
                false,
                true,
            )
        },
        contender(
            "rev_get",
            "full get_task MIP→NVM",
            &rev_get,
            Load::get("").rotating(polled_job).bearer(&token),
            false,
            false,
        ),
        contender(
            "rev_create",
            "full create MIP→NVM",
            &rev_create,
            mip_create,
            false,
            true,
        ),
        contender(
            "pg_get",
            "full get_task NVM→MIP, PostgreSQL",
            &pg_get,
            Load::get("").rotating(pg_polled).bearer(&token),
            false,
            false,
        ),
        contender(
            "pg_create",
            "full create NVM→MIP, PostgreSQL",
            &pg_create,
            nv_create.clone(),
            false,
            true,
        ),
    ];
    let mut contenders = contenders;
    let mut expected = vec![
        (200, "\"task_status\":\"In_Progress\""),
        (200, "\"task_status\":\"In_Progress\""),
        (200, "\"task_status\":\"In_Progress\""),
        (200, "\"task_status\":\"In_Progress\""),
        (201, "\"task_id\":\"task-"),
        (201, "\"task_id\":\"task-"),
        (200, "\"status\":\"running\""),
        (200, "\"job_id\""),
        (200, "\"task_status\":\"In_Progress\""),
        (201, "\"task_id\":\"task-"),
    ];
    // The baseline's processes live as long as the comparison.
    let mut baseline_runs: Vec<Running> = Vec::new();
    if let Some(bin) = &args.baseline {
        let base = Env {
            interlingua: bin.clone(),
            ..env.clone()
        };
        let serve = |name: &str, route: Route, credits: bool| -> Result<Running, String> {
            let config = base.interlingua_dir(name, upstream.addr, &[route])?;
            if credits {
                base.grant(&config)?;
            }
            base.serve(name, &config, Duration::from_secs(30))
        };
        let b_pass = serve(
            "base-passthrough",
            Route::Passthrough { prefix: "/".into() },
            false,
        )?;
        let b_get = serve("base-full-get", nv(), true)?;
        let b_create = serve("base-full-create", nv(), true)?;
        let b_polled = polled_paths(start_polled_task, &b_get, &token)?;
        let extra = [
            (
                3,
                contender(
                    "base_passthrough",
                    "baseline passthrough",
                    &b_pass,
                    static_get.clone(),
                    false,
                    false,
                ),
                expected[2],
            ),
            (
                5,
                contender(
                    "base_full_get",
                    "baseline full get_task NVM→MIP",
                    &b_get,
                    Load::get("").rotating(b_polled).bearer(&token),
                    false,
                    false,
                ),
                expected[3],
            ),
            (
                7,
                contender(
                    "base_full_create",
                    "baseline full create NVM→MIP",
                    &b_create,
                    contenders[4].load.clone(),
                    false,
                    true,
                ),
                expected[4],
            ),
        ];
        // Each right after its counterpart: A A' B B' …, so pairs are seconds apart.
        for (at, c, e) in extra {
            contenders.insert(at, c);
            expected.insert(at, e);
        }
        baseline_runs.extend([b_pass, b_get, b_create]);
        say(
            clock,
            &format!("baseline {} joins the comparison", bin.display()),
        );
    }
    for (c, (status, needle)) in contenders.iter().zip(expected) {
        check(c, status, needle)?;
    }
    say(clock, "every contender answers as expected");

    say(
        clock,
        &format!(
        "comparison: {} rounds, {} s at saturation ({} connections) and {} s at a fixed rate each",
        plan.rounds, plan.saturation_s, plan.saturation_connections, plan.rate_s
    ),
    );
    let comparison = compare::run(
        procs,
        &gens,
        plan,
        &contenders,
        upstream.service.pid,
        &mut |m| say(clock, m),
    )?;
    let x402 = x402_check(&comparison, &facilitator)?;
    say(clock, &format!("  {}", x402.line()));

    say(
        clock,
        "PostgreSQL: creates against one instance, then two on the same database",
    );
    let scaling = crate::fleet::scaling(
        procs,
        &gens,
        plan,
        &pg,
        &pg_a,
        &pg_b,
        &nv_create,
        &mut |m| say(clock, m),
    );
    let pg_over_sqlite = comparison
        .get("pg_create")
        .zip(comparison.get("full_create"))
        .and_then(|(p, q)| crate::stats::median_ratio(&p.rps(), &q.rps()));
    let pg_text = format!(
        "{}\nPostgreSQL ÷ SQLite durable creates/s, one instance each (median of the per-round ratios): {}\n{}\n",
        scaling.table().text(),
        crate::report::fmt(pg_over_sqlite, 2),
        scaling.projection(threads)
    );
    let pg_md = format!(
        "{}\n\nPostgreSQL ÷ SQLite durable creates/s, one instance each (median of the per-round ratios): {}.\n\n{}.\n",
        scaling.table().markdown(),
        crate::report::fmt(pg_over_sqlite, 2),
        scaling.projection(threads)
    );
    drop((pg_a, pg_b));

    // The durable-creates target names 2 cores: one more create contender for that curve, with a
    // worker thread per CPU of the machine's two sets, sharing them with the generator.
    let wide = if args.skip_curves {
        None
    } else {
        let cpus = format!("{},{}", args.generator_cpus, args.sut_cpus);
        let wide_env = Env {
            threads: cpu_count(&cpus),
            sut_cpus: cpus,
            ..env.clone()
        };
        let config = wide_env.interlingua_dir("full-create-all-cpus", upstream.addr, &[nv()])?;
        wide_env.grant(&config)?;
        let run = wide_env.serve("full-create-all-cpus", &config, Duration::from_secs(30))?;
        Some((run, wide_env.threads))
    };
    let targets = Targets {
        env: &env,
        full_create_all_cpus: wide.as_ref().map(|(run, threads)| (run, *threads)),
        gens: &gens,
        plan,
        clock,
        upstream: &upstream,
        nginx: &nginx,
        passthrough: &pass,
        full_get: &full_get,
        full_create: &full_create,
        rev_create: &rev_create,
        token: &token,
        full_get_paths: &polled_tasks,
    };
    let mut curves: Vec<Curve> = Vec::new();
    type Measure = fn(&Targets) -> Curve;
    let all: [(&str, Measure); 6] = [
        ("body size", curves::body_size),
        ("connections", curves::connections),
        ("routes", curves::routes),
        ("stored tasks", curves::stored_tasks),
        ("durable creates", curves::creates),
        ("idle connections", crate::idle::curve),
    ];
    for (name, f) in all.into_iter().filter(|_| !args.skip_curves) {
        let t0 = Instant::now();
        say(clock, &format!("curve: {name}"));
        let cv = f(&targets);
        for n in &cv.notes {
            say(clock, &format!("  note: {n}"));
        }
        say(
            clock,
            &format!(
                "  {} points in {:.0} s",
                cv.rows.len(),
                t0.elapsed().as_secs_f64()
            ),
        );
        curves.push(cv);
    }

    // After the curves, which share the run's time budget: this one takes a fixed few seconds a
    // round (each a 2 s job, direct and through interlingua).
    say(clock, "blocking: an A2A client waiting on a 2 s job");
    let blocking = crate::blocking::measure(&env, plan.rounds.max(3))?;
    say(clock, &format!("  {}", blocking.line()));

    // The report.
    let headline = Headline::from(&comparison, &curves);
    let out = args.out.clone().unwrap_or_else(|| {
        let base = args.repo.join("bench").join("results");
        if plan.quick {
            base.join("quick")
        } else {
            base
        }
    });
    let mut text = String::new();
    let when = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC");
    text.push_str(&format!(
        "interlingua benchmark, {} mode, {when}\nmachine: {machine}\n",
        plan.name()
    ));
    text.push_str(&format!(
        "{} rounds, alternating; req/s at saturation ({} connections, {} s); latency at {} req/s ({} s, open loop); medians over rounds\n\
         nginx: worker_processes {}, access_log off; interlingua: threads = {}, access log on (its default)\n\n",
        plan.rounds, plan.saturation_connections, plan.saturation_s, comparison.rate, plan.rate_s, env.threads, env.threads
    ));
    let main = report::main_table(&comparison);
    let ratios = report::ratio_table(&comparison);
    text.push_str(&main.text());
    text.push_str("\n\nratios (median of the per-round ratios and differences)\n");
    text.push_str(&ratios.text());
    let ceiling = report::kernel_ceiling_note(&comparison);
    text.push_str(&format!("\n{ceiling}\n{}\n", blocking.line()));
    let paid = report::x402_table(&comparison);
    text.push_str(&format!(
        "\n\nx402: a paid create against the unpaid full create (median of the per-round ratios and differences; latency at saturation)\n{}\n{}\n",
        paid.text(),
        x402.line()
    ));
    text.push_str("\n\nthe store on PostgreSQL\n");
    text.push_str(&pg_text);
    let before_after = report::baseline_table(&comparison);
    if !before_after.rows.is_empty() {
        text.push_str(
            "\n\nthis build ÷ baseline (median of the per-round ratios and differences)\n",
        );
        text.push_str(&before_after.text());
    }
    let mut md = format!(
        "# interlingua benchmark results ({} mode)\n\nTaken {when} on: {machine}.\n\n{} rounds, alternating contenders; req/s at saturation ({} connections, {} s per run); latency at a fixed {} req/s ({} s per run, open loop, latency corrected); medians over rounds. nginx: `worker_processes {}`, `access_log off`; interlingua: `threads = {}`, access log on (its default).\n\n{}\n\nRatios: the median of the per-round ratios (and differences) — pairs from the same round.\n\n{}\n",
        plan.name(),
        plan.rounds,
        plan.saturation_connections,
        plan.saturation_s,
        comparison.rate,
        plan.rate_s,
        env.threads,
        env.threads,
        main.markdown(),
        ratios.markdown()
    );
    md.push_str(&format!("\n{ceiling}.\n\n{}.\n", blocking.line()));
    md.push_str(&format!(
        "\n## x402: a paid create against the unpaid full create\n\nMedians of the per-round ratios and differences; latency from the saturation runs (closed loop: oha cannot send a nonce per request).\n\n{}\n\n{}.\n",
        paid.markdown(),
        x402.line()
    ));
    md.push_str("\n## The store on PostgreSQL\n\n");
    md.push_str(&pg_md);
    if !before_after.rows.is_empty() {
        md.push_str(&format!(
            "\nThis build against the baseline `{}` (median of the per-round ratios):\n\n{}\n",
            args.baseline
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            before_after.markdown()
        ));
    }
    for cv in &curves {
        let t = report::curve_table(cv);
        text.push_str(&format!("\n\n{}\n{}", cv.title, t.text()));
        md.push_str(&format!(
            "\n## {}\n\n![{}]({}.png)\n\n{}\n",
            cv.title,
            cv.title,
            cv.file,
            t.markdown()
        ));
        for n in &cv.notes {
            text.push_str(&format!("\nnote: {n}"));
            md.push_str(&format!("\n- {n}"));
        }
        md.push('\n');
    }
    md.push_str(&format!("\n```\n{}\n```\n", headline.line()));
    let meta = json!({
        "mode": plan.name(), "when": when.to_string(), "machine": machine, "rounds": plan.rounds,
        "saturation_s": plan.saturation_s, "saturation_connections": plan.saturation_connections,
        "rate_s": plan.rate_s, "rate_connections": plan.rate_connections, "threads": env.threads,
        "generator_cpus": args.generator_cpus, "sut_cpus": args.sut_cpus, "pinned": !args.no_pin,
        "elapsed_s": clock.elapsed().as_secs_f64(),
        "x402_facilitator": serde_json::to_value(x402).unwrap_or(Value::Null),
        "blocking": {"job_ms": crate::blocking::JOB.as_millis() as u64, "direct_ms": blocking.direct_ms, "proxied_ms": blocking.proxied_ms, "added_ms": blocking.added_ms()},
    });
    let data = report::json(&comparison, &curves, &headline, meta);
    report::write(&out, &md, &curves, &data)?;
    let mut plot_errors = Vec::new();
    for cv in &curves {
        if let Err(e) = crate::plot::draw(cv, &out.join(format!("{}.png", cv.file))) {
            plot_errors.push(format!("{}: {e}", cv.file));
        }
    }
    let failing: Vec<String> = comparison
        .measured
        .iter()
        .filter(|m| m.worst_error_rate() > 0.10)
        .map(|m| {
            format!(
                "{} ({:.0}% errors)",
                m.contender.label,
                m.worst_error_rate() * 100.0
            )
        })
        .collect();
    text.push_str(&format!(
        "\n\nresults written to {} in {:.0} s",
        out.display(),
        clock.elapsed().as_secs_f64()
    ));
    println!("{text}");
    if !plot_errors.is_empty() {
        return Err(format!("plots failed: {}", plot_errors.join("; ")));
    }
    if !failing.is_empty() {
        println!("{}", headline.line());
        return Err(format!(
            "contenders failing under load: {}",
            failing.join(", ")
        ));
    }
    println!("{}", headline.line());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_option_overrides_the_one_bench_run_gives() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(subcommand)]
            command: Sub,
        }
        #[derive(clap::Subcommand)]
        enum Sub {
            Run(RunArgs),
        }
        let cli = <Cli as clap::Parser>::try_parse_from([
            "bench",
            "run",
            "--repo",
            ".",
            "--interlingua",
            "a",
            "--interlingua",
            "b",
        ])
        .unwrap();
        let Sub::Run(args) = cli.command;
        assert_eq!(args.interlingua, PathBuf::from("b"));
    }

    #[test]
    fn cpu_lists_count_cpus() {
        assert_eq!(cpu_count("1"), 1);
        assert_eq!(cpu_count("0-3"), 4);
        assert_eq!(cpu_count("0,2-3"), 3);
    }
}
