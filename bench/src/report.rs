//! The report: the main table, the ratios (pair by pair within rounds), the curves' tables, the
//! files in the results directory, and the machine-readable headline.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{json, Value};

use crate::compare::{Comparison, Measured};
use crate::curves::Curve;
use crate::load::Outcome;
use crate::stats::{self, median_difference, median_of, median_ratio, relative_spread};

/// A table, written as aligned text or as Markdown.
pub struct Table {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    fn widths(&self) -> Vec<usize> {
        let mut w: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                if i < w.len() {
                    w[i] = w[i].max(c.chars().count());
                }
            }
        }
        w
    }

    /// Aligned columns; the first left-aligned, the others right-aligned.
    pub fn text(&self) -> String {
        let w = self.widths();
        let line = |cells: &[String]| {
            cells
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let pad = w[i].saturating_sub(c.chars().count());
                    if i == 0 {
                        format!("{c}{}", " ".repeat(pad))
                    } else {
                        format!("{}{c}", " ".repeat(pad))
                    }
                })
                .collect::<Vec<_>>()
                .join("  ")
        };
        let mut s = line(&self.headers);
        s.push('\n');
        s.push_str(&"-".repeat(w.iter().sum::<usize>() + 2 * w.len().saturating_sub(1)));
        for r in &self.rows {
            s.push('\n');
            s.push_str(&line(r));
        }
        s
    }

    pub fn markdown(&self) -> String {
        let mut s = format!("| {} |\n|", self.headers.join(" | "));
        for i in 0..self.headers.len() {
            s.push_str(if i == 0 { "---|" } else { "---:|" });
        }
        for r in &self.rows {
            s.push_str(&format!("\n| {} |", r.join(" | ")));
        }
        s
    }
}

/// A figure with `digits` decimals, or `–` when there is none.
pub fn fmt(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        _ => "–".to_string(),
    }
}

fn p50(o: &Outcome) -> f64 {
    o.p50_ms
}
fn p99(o: &Outcome) -> f64 {
    o.p99_ms
}
fn p999(o: &Outcome) -> f64 {
    o.p999_ms
}

/// The main table: one row per contender, medians over rounds.
pub fn main_table(c: &Comparison) -> Table {
    let mut t = Table::new(&[
        "contender",
        "req/s",
        "spread",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "CPU s/10k",
        "of which kernel",
        "upstream CPU s/10k",
        "peak RSS MiB",
        "generator load",
        "worst errors",
    ]);
    for m in &c.measured {
        let gen = m.generator_load();
        let mut gen_s = fmt(gen, 2);
        if gen.is_some_and(|g| g > 0.9) {
            gen_s.push_str(" (bound)");
        }
        t.rows.push(vec![
            m.contender.label.to_string(),
            fmt(median_of(&m.rps()), 0),
            relative_spread(&m.rps())
                .map(|s| format!("±{:.0}%", s * 50.0))
                .unwrap_or_else(|| "–".into()),
            fmt(median_of(&m.latency(p50)), 2),
            fmt(median_of(&m.latency(p99)), 2),
            fmt(median_of(&m.latency(p999)), 2),
            fmt(median_of(&m.cpu_per_10k()), 3),
            fmt(median_of(&m.kernel_cpu_per_10k()), 3),
            fmt(median_of(&m.upstream_cpu_per_10k()), 3),
            fmt(m.peak_rss_mib, 1),
            gen_s,
            format!("{:.2}%", m.worst_error_rate() * 100.0),
        ]);
    }
    t
}

/// Ratios against nginx and against direct, each the median of per-round ratios.
pub fn ratio_table(c: &Comparison) -> Table {
    let mut t = Table::new(&[
        "contender",
        "req/s ÷ nginx",
        "req/s ÷ direct",
        "CPU/10k ÷ nginx",
        "p50 added vs direct (ms)",
        "p99 added vs direct (ms)",
        "p99 added vs nginx (ms)",
    ]);
    let (Some(nginx), Some(direct)) = (c.get("nginx"), c.get("direct")) else {
        return t;
    };
    for m in c.measured.iter().filter(|m| m.contender.key != "direct") {
        t.rows.push(vec![
            m.contender.label.to_string(),
            fmt(median_ratio(&m.rps(), &nginx.rps()), 3),
            fmt(median_ratio(&m.rps(), &direct.rps()), 3),
            fmt(median_ratio(&m.cpu_per_10k(), &nginx.cpu_per_10k()), 2),
            fmt(median_difference(&m.latency(p50), &direct.latency(p50)), 3),
            fmt(median_difference(&m.latency(p99), &direct.latency(p99)), 3),
            fmt(median_difference(&m.latency(p99), &nginx.latency(p99)), 3),
        ]);
    }
    t
}

/// The kernel ceiling against nginx (see [`stats::kernel_ceiling`]): the median over rounds.
pub fn kernel_ceiling(c: &Comparison) -> Option<f64> {
    let nginx = c.get("nginx")?;
    let per_round: Vec<Option<f64>> = nginx
        .cpu_per_10k()
        .into_iter()
        .zip(nginx.kernel_cpu_per_10k())
        .zip(nginx.upstream_cpu_per_10k())
        .map(|((cpu, kernel), up)| stats::kernel_ceiling(cpu?, kernel?, up?))
        .collect();
    median_of(&per_round)
}

/// What the ceiling means, for the report.
pub fn kernel_ceiling_note(c: &Comparison) -> String {
    format!(
        "kernel ceiling: a proxy with nginx's kernel CPU per request and no user time at all would reach {}× nginx on this CPU (shared with the upstream): (nginx CPU + upstream CPU) ÷ (nginx kernel CPU + upstream CPU), median of rounds",
        fmt(kernel_ceiling(c), 2)
    )
}

/// This build against the baseline binary, pair by pair (`passthrough` with
/// `base_passthrough`, …); empty when the run had no baseline.
pub fn baseline_table(c: &Comparison) -> Table {
    let mut t = Table::new(&[
        "contender",
        "req/s ÷ baseline",
        "CPU/10k ÷ baseline",
        "p50 change (ms)",
        "p99 change (ms)",
        "peak RSS change (MiB)",
    ]);
    for (key, base) in [
        ("passthrough", "base_passthrough"),
        ("full_get", "base_full_get"),
        ("full_create", "base_full_create"),
    ] {
        let (Some(m), Some(b)) = (c.get(key), c.get(base)) else {
            continue;
        };
        t.rows.push(vec![
            m.contender.label.to_string(),
            fmt(median_ratio(&m.rps(), &b.rps()), 3),
            fmt(median_ratio(&m.cpu_per_10k(), &b.cpu_per_10k()), 3),
            fmt(median_difference(&m.latency(p50), &b.latency(p50)), 3),
            fmt(median_difference(&m.latency(p99), &b.latency(p99)), 3),
            fmt(m.peak_rss_mib.zip(b.peak_rss_mib).map(|(x, y)| x - y), 1),
        ]);
    }
    t
}

/// The paid create (`x402_create`) against the unpaid full create it follows in each round:
/// what paying with x402 adds to a create; empty when the run had neither.
pub fn x402_table(c: &Comparison) -> Table {
    let mut t = Table::new(&[
        "contender",
        "creates/s",
        "÷ full create",
        "CPU s/10k",
        "÷ full create",
        "added CPU s/10k",
        "added µs a create",
        "facilitator CPU s/10k",
        "p50 ms (saturation)",
        "p99 ms (saturation)",
    ]);
    let (Some(free), Some(paid)) = (c.get("full_create"), c.get("x402_create")) else {
        return t;
    };
    for m in [free, paid] {
        let added = median_difference(&m.cpu_per_10k(), &free.cpu_per_10k());
        t.rows.push(vec![
            m.contender.label.to_string(),
            fmt(median_of(&m.rps()), 0),
            fmt(median_ratio(&m.rps(), &free.rps()), 3),
            fmt(median_of(&m.cpu_per_10k()), 3),
            fmt(median_ratio(&m.cpu_per_10k(), &free.cpu_per_10k()), 3),
            fmt(added, 3),
            // 1 s per 10k requests is 100 µs a request.
            fmt(added.map(|s| s * 100.0), 1),
            fmt(median_of(&m.facilitator_cpu_per_10k()), 3),
            fmt(median_of(&m.saturation_latency(p50)), 2),
            fmt(median_of(&m.saturation_latency(p99)), 2),
        ]);
    }
    t
}

/// The figures of the headline line.
#[derive(Debug, Clone, Default)]
pub struct Headline {
    pub passthrough_over_nginx: Option<f64>,
    pub full_get_over_nginx: Option<f64>,
    pub full_create_per_s: Option<f64>,
    pub p99_added_ms: Option<f64>,
    pub rss_mb_1e5_tasks: Option<f64>,
}

impl Headline {
    pub fn from(c: &Comparison, curves: &[Curve]) -> Headline {
        let rps = |k: &str| c.get(k).map(Measured::rps).unwrap_or_default();
        let lat = |k: &str| c.get(k).map(|m| m.latency(p99)).unwrap_or_default();
        let rss = curves
            .iter()
            .find(|cv| cv.file == "stored_tasks")
            .and_then(|cv| {
                cv.rows
                    .iter()
                    .filter(|r| r.x == 100_000.0)
                    .filter_map(|r| r.metric("peak RSS MiB"))
                    .reduce(f64::max)
            });
        Headline {
            passthrough_over_nginx: median_ratio(&rps("passthrough"), &rps("nginx")),
            full_get_over_nginx: median_ratio(&rps("full_get"), &rps("nginx")),
            full_create_per_s: median_of(&rps("full_create")),
            p99_added_ms: median_difference(&lat("full_get"), &lat("direct")),
            rss_mb_1e5_tasks: rss,
        }
    }

    /// `headline passthrough/nginx=R1 full_get/nginx=R2 full_create_per_s=C p99_added_ms=M rss_mb_1e5_tasks=S`
    /// (`na` for a figure the run could not take).
    pub fn line(&self) -> String {
        let f = |v: Option<f64>, d: usize| match v {
            Some(v) if v.is_finite() => format!("{v:.d$}"),
            _ => "na".to_string(),
        };
        format!(
            "headline passthrough/nginx={} full_get/nginx={} full_create_per_s={} p99_added_ms={} rss_mb_1e5_tasks={}",
            f(self.passthrough_over_nginx, 3),
            f(self.full_get_over_nginx, 3),
            f(self.full_create_per_s, 0),
            f(self.p99_added_ms, 3),
            f(self.rss_mb_1e5_tasks, 1)
        )
    }
}

/// A curve's table: x, series, then its metrics.
pub fn curve_table(curve: &Curve) -> Table {
    let names: Vec<&str> = curve
        .rows
        .first()
        .map(|r| r.metrics.iter().map(|(n, _)| *n).collect())
        .unwrap_or_default();
    let mut headers = vec![curve.x_label, "series"];
    headers.extend(names.iter().copied());
    let mut t = Table::new(&headers);
    for r in &curve.rows {
        let mut row = vec![(curve.x_format)(r.x), r.series.clone()];
        for n in &names {
            let digits = if n.contains("ms") {
                3
            } else if n.contains('÷') {
                2
            } else if n.contains("MiB") || n.ends_with(" s") {
                1
            } else {
                0
            };
            row.push(fmt(r.metric(n), digits));
        }
        t.rows.push(row);
    }
    t
}

/// What the machine is, for the results.
pub fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map(|kb| kb / 1024.0 / 1024.0)
        .unwrap_or(0.0);
    let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
    let debian = read("/etc/debian_version").trim().to_string();
    let load = read("/proc/loadavg")
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    format!("{cpus} × {model}, {mem:.0} GiB RAM, Linux {kernel}, Debian {debian}; load average at start {load}")
}

/// Everything a run measured, as JSON (per-round figures included).
pub fn json(c: &Comparison, curves: &[Curve], headline: &Headline, meta: Value) -> Value {
    let outcome = |o: &Option<Outcome>| {
        o.as_ref().map(|o| {
            json!({"requests": o.requests, "seconds": o.seconds, "rps": o.rps, "errors": o.errors,
                   "p50_ms": o.p50_ms, "p99_ms": o.p99_ms, "p999_ms": o.p999_ms, "max_ms": o.max_ms,
                   "generator_cpu_s": o.generator_cpu_s})
        })
    };
    let contenders: Vec<Value> = c
        .measured
        .iter()
        .map(|m| {
            json!({
                "key": m.contender.key, "label": m.contender.label, "warm_rps": m.warm_rps,
                "peak_rss_mib": m.peak_rss_mib,
                "rounds": m.rounds.iter().map(|r| json!({
                    "saturation": outcome(&r.saturation), "cpu_s": r.cpu_s,
                    "upstream_cpu_s": r.upstream_cpu_s, "kernel_cpu_s": r.kernel_cpu_s,
                    "facilitator_cpu_s": r.facilitator_cpu_s, "rate": outcome(&r.rate),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let curves: Vec<Value> = curves
        .iter()
        .map(|cv| {
            json!({
                "name": cv.file, "title": cv.title, "notes": cv.notes,
                "rows": cv.rows.iter().map(|r| {
                    let mut m = serde_json::Map::new();
                    m.insert("x".into(), json!(r.x));
                    m.insert("series".into(), json!(r.series));
                    for (k, v) in &r.metrics {
                        m.insert((*k).to_string(), json!(v));
                    }
                    Value::Object(m)
                }).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "meta": meta, "fixed_rate": c.rate, "contenders": contenders, "curves": curves,
        "headline": headline.line(),
    })
}

/// Writes `summary.md`, one `.md` (and `.png`, by the caller) per curve, and `results.json`.
pub fn write(dir: &Path, summary: &str, curves: &[Curve], data: &Value) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let w = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text)
            .map_err(|e| format!("{}: {e}", dir.join(name).display()))
    };
    w("summary.md", summary)?;
    for cv in curves {
        let mut s = format!("# {}\n\n{}\n", cv.title, curve_table(cv).markdown());
        for n in &cv.notes {
            let _ = write!(s, "\n- {n}");
        }
        s.push('\n');
        w(&format!("{}.md", cv.file), &s)?;
    }
    w(
        "results.json",
        &serde_json::to_string_pretty(data).map_err(|e| e.to_string())?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headline_prints_na_for_missing_figures() {
        let h = Headline {
            passthrough_over_nginx: Some(0.91234),
            full_get_over_nginx: None,
            full_create_per_s: Some(812.4),
            p99_added_ms: Some(1.23456),
            rss_mb_1e5_tasks: None,
        };
        assert_eq!(
            h.line(),
            "headline passthrough/nginx=0.912 full_get/nginx=na full_create_per_s=812 p99_added_ms=1.235 rss_mb_1e5_tasks=na"
        );
    }

    #[test]
    fn curve_cells_keep_the_digits_their_unit_needs() {
        use crate::curves::{Curve, Row};
        let curve = Curve {
            file: "t",
            title: "t".into(),
            x_label: "n",
            x_format: |x| format!("{x}"),
            plotted: vec![],
            y_label: "",
            rows: vec![Row {
                x: 10.0,
                series: "s".into(),
                metrics: vec![
                    ("req/s", Some(1234.56)),
                    ("p50 ms", Some(1.23456)),
                    ("÷ ref", Some(1.236)),
                    ("peak RSS MiB", Some(41.96)),
                    ("errors", None),
                ],
            }],
            notes: vec![],
        };
        assert_eq!(
            curve_table(&curve).rows,
            vec![vec!["10", "s", "1235", "1.235", "1.24", "42.0", "–"]]
        );
    }

    #[test]
    fn tables_align_and_render_markdown() {
        let mut t = Table::new(&["a", "bb"]);
        t.rows.push(vec!["xyz".into(), "1".into()]);
        assert_eq!(t.text(), "a    bb\n-------\nxyz   1");
        assert_eq!(t.markdown(), "| a | bb |\n|---|---:|\n| xyz | 1 |");
    }
}
