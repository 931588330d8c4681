//! The main comparison: every contender driven in alternation (A B C … then A B C … again), each
//! round a saturation pass (wrk) and then a fixed-rate pass (oha), with the CPU each process used
//! read from `/proc` around each run.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::load::{Generators, Load, Outcome};
use crate::plan::Plan;
use crate::procs::{peak_rss_mib, Procs};
use crate::stats;

/// One contender of the main table.
#[derive(Debug, Clone)]
pub struct Contender {
    /// Short name used in ratios and the headline (`direct`, `nginx`, `passthrough`, …).
    pub key: &'static str,
    pub label: &'static str,
    pub addr: SocketAddr,
    pub load: Load,
    /// The process whose CPU and memory are the contender's (for `direct`, the upstream).
    pub pid: u32,
    /// Count the process's direct children too (nginx's workers).
    pub tree: bool,
    /// Whether its requests start work that continues after the answer (a create: the watcher
    /// polls and settles each task), so a run's CPU is counted until the process is quiet.
    pub lingers: bool,
    /// The stand-in x402 facilitator's pid, when the contender's requests are paid: its CPU is
    /// read around each saturation run, as the upstream's is.
    pub facilitator: Option<u32>,
}

/// What one round measured for one contender.
#[derive(Debug, Clone, Default)]
pub struct Round {
    pub saturation: Option<Outcome>,
    /// CPU seconds the contender used during the saturation run (and its lingering work).
    pub cpu_s: Option<f64>,
    /// The part of `cpu_s` spent in the kernel.
    pub kernel_cpu_s: Option<f64>,
    /// CPU seconds the upstream used meanwhile (zero-cost for nobody: it is the same upstream).
    pub upstream_cpu_s: Option<f64>,
    /// CPU seconds the facilitator used meanwhile (paid contenders only).
    pub facilitator_cpu_s: Option<f64>,
    pub rate: Option<Outcome>,
}

/// A contender's rounds.
#[derive(Debug, Clone)]
pub struct Measured {
    pub contender: Contender,
    pub warm_rps: f64,
    pub rounds: Vec<Round>,
    pub peak_rss_mib: Option<f64>,
}

impl Measured {
    pub fn rps(&self) -> Vec<Option<f64>> {
        self.rounds
            .iter()
            .map(|r| r.saturation.as_ref().map(|o| o.rps))
            .collect()
    }

    pub fn latency(&self, pick: fn(&Outcome) -> f64) -> Vec<Option<f64>> {
        self.rounds
            .iter()
            .map(|r| r.rate.as_ref().map(pick))
            .collect()
    }

    /// A latency figure of each round's saturation run (closed loop, wrk).
    pub fn saturation_latency(&self, pick: fn(&Outcome) -> f64) -> Vec<Option<f64>> {
        self.rounds
            .iter()
            .map(|r| r.saturation.as_ref().map(pick))
            .collect()
    }

    /// CPU seconds per 10k requests in each round.
    pub fn cpu_per_10k(&self) -> Vec<Option<f64>> {
        self.rounds
            .iter()
            .map(|r| stats::cpu_per_10k(r.cpu_s?, r.saturation.as_ref()?.requests))
            .collect()
    }

    /// Kernel CPU seconds per 10k requests in each round.
    pub fn kernel_cpu_per_10k(&self) -> Vec<Option<f64>> {
        self.rounds
            .iter()
            .map(|r| stats::cpu_per_10k(r.kernel_cpu_s?, r.saturation.as_ref()?.requests))
            .collect()
    }

    pub fn upstream_cpu_per_10k(&self) -> Vec<Option<f64>> {
        self.rounds
            .iter()
            .map(|r| stats::cpu_per_10k(r.upstream_cpu_s?, r.saturation.as_ref()?.requests))
            .collect()
    }

    pub fn facilitator_cpu_per_10k(&self) -> Vec<Option<f64>> {
        self.rounds
            .iter()
            .map(|r| stats::cpu_per_10k(r.facilitator_cpu_s?, r.saturation.as_ref()?.requests))
            .collect()
    }

    /// Requests answered below 400 in the saturation runs (what a paid contender's facilitator
    /// must at least have settled).
    pub fn answered_ok(&self) -> u64 {
        self.rounds
            .iter()
            .filter_map(|r| r.saturation.as_ref())
            .map(|o| o.requests.saturating_sub(o.errors))
            .sum()
    }

    /// The worst error rate of any run.
    pub fn worst_error_rate(&self) -> f64 {
        self.rounds
            .iter()
            .flat_map(|r| [r.saturation.as_ref(), r.rate.as_ref()])
            .flatten()
            .map(Outcome::error_rate)
            .fold(0.0, f64::max)
    }

    /// Generator CPU seconds per wall second in saturation runs: near 1.0 (one core) means the
    /// generator, not the contender, set the pace.
    pub fn generator_load(&self) -> Option<f64> {
        let v: Vec<Option<f64>> = self
            .rounds
            .iter()
            .map(|r| {
                r.saturation
                    .as_ref()
                    .map(|o| o.generator_cpu_s / o.seconds.max(1e-9))
            })
            .collect();
        stats::median_of(&v)
    }
}

/// The comparison's outcome.
pub struct Comparison {
    pub measured: Vec<Measured>,
    /// The fixed rate of the latency runs, requests per second.
    pub rate: u32,
}

impl Comparison {
    pub fn get(&self, key: &str) -> Option<&Measured> {
        self.measured.iter().find(|m| m.contender.key == key)
    }
}

/// Waits until `pid` uses almost no CPU (at most `max`), so that work a run started is counted
/// in that run and does not spill into the next contender's. Returns whether it went quiet.
pub fn settle(procs: &Procs, pid: u32, tree: bool, max: Duration) -> bool {
    let deadline = Instant::now() + max;
    let mut last = procs.cpu_seconds(pid, tree);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let now = procs.cpu_seconds(pid, tree);
        if now - last < 0.003 {
            return true;
        }
        last = now;
    }
    false
}

/// A "nice" rate at most `r`: 1, 2 or 5 times a power of ten.
pub fn nice_rate(r: f64) -> u32 {
    if r < 1.0 {
        return 1;
    }
    let p = 10f64.powf(r.log10().floor());
    let m = [5.0, 2.0, 1.0]
        .into_iter()
        .find(|m| m * p <= r)
        .unwrap_or(1.0);
    (m * p) as u32
}

/// Runs the comparison: warm-up, then `plan.rounds` rounds.
pub fn run(
    procs: &Procs,
    gens: &Generators,
    plan: &Plan,
    contenders: &[Contender],
    upstream_pid: u32,
    log: &mut dyn FnMut(&str),
) -> Result<Comparison, String> {
    let mut measured: Vec<Measured> = contenders
        .iter()
        .map(|c| Measured {
            contender: c.clone(),
            warm_rps: 0.0,
            rounds: Vec::new(),
            peak_rss_mib: None,
        })
        .collect();
    for m in &mut measured {
        let c = &m.contender;
        let o = gens.wrk(
            procs,
            &base(c.addr),
            &c.load,
            plan.saturation_connections,
            plan.warmup_s,
        )?;
        settle(procs, c.pid, c.tree, plan.settle_max);
        if o.error_rate() > 0.5 {
            return Err(format!(
                "{} fails under load during warm-up ({} of {} requests failed); see its log",
                c.label, o.errors, o.requests
            ));
        }
        m.warm_rps = o.rps;
        log(&format!("  warm-up {:<28} {:>9.0} req/s", c.label, o.rps));
    }
    // Of the contenders that have a fixed-rate pass (oha cannot send a paid load).
    let slowest = measured
        .iter()
        .filter(|m| m.contender.load.open_loop())
        .map(|m| m.warm_rps)
        .fold(f64::INFINITY, f64::min);
    let rate = nice_rate((slowest / 2.0).min(f64::from(plan.rate_cap)));
    log(&format!("  fixed rate for latency: {rate} req/s (half the slowest contender's warm-up rate, at most {})", plan.rate_cap));
    for m in measured.iter().filter(|m| !m.contender.load.open_loop()) {
        log(&format!(
            "  {}: no fixed-rate pass (oha sends one fixed header; each paid request needs a nonce of its own)",
            m.contender.label
        ));
    }

    for round in 0..plan.rounds {
        for m in &mut measured {
            let c = &m.contender;
            let cpu0 = procs.cpu(c.pid, c.tree);
            let up0 = procs.cpu_seconds(upstream_pid, false);
            let fac0 = c.facilitator.map(|pid| procs.cpu_seconds(pid, false));
            let o = gens.wrk(
                procs,
                &base(c.addr),
                &c.load,
                plan.saturation_connections,
                plan.saturation_s,
            );
            if c.lingers && !settle(procs, c.pid, c.tree, plan.settle_max) {
                log(&format!(
                    "  note: {} was still busy {} s after the run (its watcher settling tasks); the rest spills into the next run",
                    c.label,
                    plan.settle_max.as_secs_f64()
                ));
            }
            let split = procs.cpu(c.pid, c.tree) - cpu0;
            let cpu = split.total();
            let up = procs.cpu_seconds(upstream_pid, false) - up0;
            let fac = c
                .facilitator
                .zip(fac0)
                .map(|(pid, before)| procs.cpu_seconds(pid, false) - before);
            let mut r = Round::default();
            match o {
                Ok(o) => {
                    log(&format!(
                        "  round {} saturation {:<28} {:>9.0} req/s  cpu {:.2}s  errors {}",
                        round + 1,
                        c.label,
                        o.rps,
                        cpu,
                        o.errors
                    ));
                    r.saturation = Some(o);
                    r.cpu_s = Some(cpu);
                    r.kernel_cpu_s = Some(split.kernel);
                    // The direct contender *is* the upstream: its own CPU is already counted.
                    r.upstream_cpu_s = (c.pid != upstream_pid).then_some(up);
                    r.facilitator_cpu_s = fac;
                }
                Err(e) => log(&format!(
                    "  round {} saturation {}: {e}",
                    round + 1,
                    c.label
                )),
            }
            m.rounds.push(r);
        }
        for m in measured.iter_mut().filter(|m| m.contender.load.open_loop()) {
            let c = &m.contender;
            let o = gens.oha(
                procs,
                &base(c.addr),
                &c.load,
                rate,
                plan.rate_connections,
                plan.rate_s,
            );
            if c.lingers {
                settle(procs, c.pid, c.tree, plan.settle_max);
            }
            let last = m.rounds.last_mut().ok_or("no round")?;
            match o {
                Ok(o) => {
                    log(&format!(
                        "  round {} at {rate}/s    {:<28} p50 {:.2} ms  p99 {:.2} ms  p99.9 {:.2} ms",
                        round + 1,
                        c.label,
                        o.p50_ms,
                        o.p99_ms,
                        o.p999_ms
                    ));
                    last.rate = Some(o);
                }
                Err(e) => log(&format!(
                    "  round {} at {rate}/s {}: {e}",
                    round + 1,
                    c.label
                )),
            }
        }
    }
    for m in &mut measured {
        m.peak_rss_mib = peak_rss_mib(m.contender.pid, m.contender.tree);
    }
    Ok(Comparison { measured, rate })
}

/// `http://ADDR`.
pub fn base(addr: SocketAddr) -> String {
    format!("http://{addr}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_rates_round_down_to_1_2_5() {
        assert_eq!(nice_rate(1234.0), 1000);
        assert_eq!(nice_rate(999.0), 500);
        assert_eq!(nice_rate(450.0), 200);
        assert_eq!(nice_rate(20.0), 20);
        assert_eq!(nice_rate(0.3), 1);
    }
}
