//! The load generators: `wrk` (closed loop, for throughput at saturation and latency at a given
//! number of connections) and `oha` (open loop at a fixed rate, with latency measured from when
//! each request was due, so a stall is not hidden by coordinated omission). Both run pinned to
//! the generator's CPUs, bounded in time.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::http::Request;
use crate::payer::{Payer, HEADER};
use crate::procs::Procs;

/// What a request's body is, for the generators.
#[derive(Debug, Clone)]
pub enum Body {
    None,
    /// A literal body.
    Text(String),
    /// `prefix`, then `fill` repeated to `len` bytes, then `suffix` (a large JSON body).
    Filled {
        prefix: String,
        fill: char,
        len: usize,
        suffix: String,
    },
}

impl Body {
    /// The whole body.
    pub fn render(&self) -> Option<String> {
        match self {
            Body::None => None,
            Body::Text(t) => Some(t.clone()),
            Body::Filled {
                prefix,
                fill,
                len,
                suffix,
            } => Some(format!("{prefix}{}{suffix}", fill.to_string().repeat(*len))),
        }
    }
}

/// What to send, over and over.
#[derive(Debug, Clone)]
pub struct Load {
    pub method: &'static str,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Body,
    /// When set, `path` is a prefix and each request appends a random number below `.0`,
    /// zero-padded to `.1` digits (random stored tasks).
    pub random_suffix: Option<(u64, usize)>,
    /// When not empty, the closed loop's requests go to these paths in turn (`path` is the
    /// first; the open loop and the harness's own checks use it alone).
    pub paths: Vec<String>,
    /// When set, each request pays with x402, with a `PAYMENT-SIGNATURE` of its own (a fresh
    /// nonce): wrk makes them; oha, which sends one fixed header, cannot send this load.
    pub payment: Option<Arc<Payer>>,
}

impl Load {
    pub fn get(path: impl Into<String>) -> Load {
        Load {
            method: "GET",
            path: path.into(),
            headers: Vec::new(),
            body: Body::None,
            random_suffix: None,
            paths: Vec::new(),
            payment: None,
        }
    }

    /// The same request to each of `paths` in turn (see [`Load::paths`]).
    pub fn rotating(mut self, paths: Vec<String>) -> Load {
        if let Some(first) = paths.first() {
            self.path = first.clone();
        }
        self.paths = paths;
        self
    }

    pub fn post(path: impl Into<String>, body: Body) -> Load {
        Load {
            method: "POST",
            path: path.into(),
            headers: vec![("Content-Type".into(), "application/json".into())],
            body,
            random_suffix: None,
            paths: Vec::new(),
            payment: None,
        }
    }

    pub fn bearer(mut self, token: &str) -> Load {
        self.headers
            .push(("Authorization".into(), format!("Bearer {token}")));
        self
    }

    /// Each request paid by `payer` (see [`Load::payment`]).
    pub fn paid(mut self, payer: Arc<Payer>) -> Load {
        self.payment = Some(payer);
        self
    }

    /// Whether oha can send this load at a fixed rate (it sends the same headers every time).
    pub fn open_loop(&self) -> bool {
        self.payment.is_none()
    }

    /// The same request for the harness's own client (one request, to check an answer; a paid
    /// load's with a payment of its own).
    pub fn one(&self) -> Request {
        let path = match self.random_suffix {
            Some((_, width)) => format!("{}{:0width$}", self.path, 0, width = width),
            None => self.path.clone(),
        };
        let mut headers = self.headers.clone();
        if let Some(payer) = &self.payment {
            headers.push((HEADER.to_string(), payer.header(payer.batch(), 0)));
        }
        Request {
            method: self.method,
            path,
            headers,
            body: self.body.render(),
        }
    }
}

/// What a load run measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Completed requests (answered, whatever the status).
    pub requests: u64,
    pub seconds: f64,
    pub rps: f64,
    /// Connection errors, timeouts and answers with status >= 400.
    pub errors: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// CPU seconds the generator itself used (to tell when it, not the contender, was the limit).
    pub generator_cpu_s: f64,
}

impl Outcome {
    /// The share of requests that failed.
    pub fn error_rate(&self) -> f64 {
        if self.requests == 0 {
            return 1.0;
        }
        self.errors as f64 / self.requests as f64
    }
}

/// Where the generators are and how they run.
pub struct Generators {
    pub wrk: PathBuf,
    pub oha: PathBuf,
    /// The generator's CPUs (a `taskset` list).
    pub cpus: String,
    /// Where scripts and bodies are written.
    pub dir: PathBuf,
}

fn lua_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The wrk script for `load`: method, headers, body, an optional random path, a paid load's
/// payments (a new batch of nonces each time it is called), and a `done` that prints the
/// figures as one JSON line.
pub fn wrk_script(load: &Load) -> String {
    let mut s = format!("wrk.method = {}\n", lua_string(load.method));
    for (k, v) in &load.headers {
        s.push_str(&format!(
            "wrk.headers[{}] = {}\n",
            lua_string(k),
            lua_string(v)
        ));
    }
    match &load.body {
        Body::None => {}
        Body::Text(t) => s.push_str(&format!("wrk.body = {}\n", lua_string(t))),
        Body::Filled {
            prefix,
            fill,
            len,
            suffix,
        } => s.push_str(&format!(
            "wrk.body = {} .. string.rep({}, {len}) .. {}\n",
            lua_string(prefix),
            lua_string(&fill.to_string()),
            lua_string(suffix)
        )),
    }
    if let Some((n, width)) = load.random_suffix {
        s.push_str(&format!(
            "local prefix = {}\nmath.randomseed(os.time())\nrequest = function()\n  return wrk.format(nil, prefix .. string.format(\"%0{width}d\", math.random(0, {})))\nend\n",
            lua_string(&load.path),
            n.saturating_sub(1)
        ));
    }
    if !load.paths.is_empty() {
        let list: Vec<String> = load.paths.iter().map(|p| lua_string(p)).collect();
        s.push_str(&format!(
            "local paths = {{{}}}\nlocal turn = 0\nrequest = function()\n  turn = turn % #paths + 1\n  return wrk.format(nil, paths[turn])\nend\n",
            list.join(", ")
        ));
    }
    if let Some(payer) = &load.payment {
        s.push_str(&payer.lua(payer.batch()));
    }
    s.push_str(
        r#"done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRKJSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"p50":%d,"p99":%d,"p999":%d,"max":%d}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.max))
end
"#,
    );
    s
}

/// Parses the `WRKJSON` line of a wrk run.
pub fn parse_wrk(stdout: &str) -> Result<Outcome, String> {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("WRKJSON "))
        .ok_or_else(|| format!("wrk printed no figures:\n{stdout}"))?;
    let v: Value = serde_json::from_str(line).map_err(|e| format!("wrk figures: {e}: {line}"))?;
    let n = |k: &str| v[k].as_f64().unwrap_or(0.0);
    let seconds = n("duration_us") / 1e6;
    let requests = n("requests") as u64;
    Ok(Outcome {
        requests,
        seconds,
        rps: if seconds > 0.0 {
            requests as f64 / seconds
        } else {
            0.0
        },
        errors: (n("connect") + n("read") + n("write") + n("status") + n("timeout")) as u64,
        p50_ms: n("p50") / 1000.0,
        p99_ms: n("p99") / 1000.0,
        p999_ms: n("p999") / 1000.0,
        max_ms: n("max") / 1000.0,
        generator_cpu_s: 0.0,
    })
}

/// Parses oha's JSON output (times in seconds).
pub fn parse_oha(stdout: &str) -> Result<Outcome, String> {
    let start = stdout
        .find('{')
        .ok_or_else(|| format!("oha printed no JSON:\n{stdout}"))?;
    let v: Value = serde_json::from_str(&stdout[start..]).map_err(|e| format!("oha JSON: {e}"))?;
    let s = &v["summary"];
    let p = &v["latencyPercentiles"];
    let ms = |x: &Value| x.as_f64().unwrap_or(f64::NAN) * 1000.0;
    let mut ok = 0u64;
    let mut failed = 0u64;
    if let Some(codes) = v["statusCodeDistribution"].as_object() {
        for (code, n) in codes {
            let n = n.as_u64().unwrap_or(0);
            if code.parse::<u16>().map(|c| c < 400).unwrap_or(false) {
                ok += n;
            } else {
                failed += n;
            }
        }
    }
    // Requests still in flight when the duration ends are aborted by oha, not failed.
    let transport: u64 = v["errorDistribution"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !k.contains("deadline"))
                .filter_map(|(_, n)| n.as_u64())
                .sum()
        })
        .unwrap_or(0);
    let seconds = s["total"].as_f64().unwrap_or(0.0);
    let requests = ok + failed;
    Ok(Outcome {
        requests,
        seconds,
        rps: if seconds > 0.0 {
            requests as f64 / seconds
        } else {
            0.0
        },
        errors: failed + transport,
        p50_ms: ms(&p["p50"]),
        p99_ms: ms(&p["p99"]),
        p999_ms: ms(&p["p99.9"]),
        max_ms: ms(&s["slowest"]),
        generator_cpu_s: 0.0,
    })
}

impl Generators {
    /// Closed loop: `connections` connections, each sending as fast as answers come, for
    /// `seconds`.
    pub fn wrk(
        &self,
        procs: &Procs,
        base: &str,
        load: &Load,
        connections: u32,
        seconds: u64,
    ) -> Result<Outcome, String> {
        let text = wrk_script(load);
        let script = self.write(&format!("wrk-{}.lua", digest(&text)), &text)?;
        let url = format!(
            "{base}{}",
            if load.random_suffix.is_some() {
                "/"
            } else {
                &load.path
            }
        );
        let args: Vec<String> = vec![
            "-t1".into(),
            format!("-c{connections}"),
            format!("-d{seconds}s"),
            "--timeout".into(),
            "10s".into(),
            "-s".into(),
            script.display().to_string(),
            url,
        ];
        let cmd = procs.command(&self.cpus, &self.wrk, &args);
        let before = children_cpu();
        let out = procs.run("wrk", cmd, Duration::from_secs(seconds + 20))?;
        let mut o = parse_wrk(&out)?;
        o.generator_cpu_s = children_cpu() - before;
        Ok(o)
    }

    /// Open loop: `rate` requests per second over up to `connections` connections, for
    /// `seconds`; latency counted from when each request was due.
    pub fn oha(
        &self,
        procs: &Procs,
        base: &str,
        load: &Load,
        rate: u32,
        connections: u32,
        seconds: f64,
    ) -> Result<Outcome, String> {
        if !load.open_loop() {
            return Err(
                "oha sends one fixed header: it cannot send a load that pays each request".into(),
            );
        }
        let mut args: Vec<String> = vec![
            "--no-tui".into(),
            "--output-format".into(),
            "json".into(),
            "-z".into(),
            format!("{}ms", (seconds * 1000.0) as u64),
            "-c".into(),
            connections.to_string(),
            "-q".into(),
            rate.to_string(),
            "--latency-correction".into(),
            "-m".into(),
            load.method.into(),
        ];
        for (k, v) in &load.headers {
            args.push("-H".into());
            args.push(format!("{k}: {v}"));
        }
        if let Some(body) = load.body.render() {
            let file = self.write(&format!("body-{}.json", digest(&body)), &body)?;
            args.push("-D".into());
            args.push(file.display().to_string());
        }
        args.push(format!("{base}{}", load.one().path));
        let cmd = procs.command(&self.cpus, &self.oha, &args);
        let before = children_cpu();
        let out = procs.run("oha", cmd, Duration::from_secs(seconds as u64 + 20))?;
        let mut o = parse_oha(&out)?;
        o.generator_cpu_s = children_cpu() - before;
        Ok(o)
    }

    fn write(&self, name: &str, text: &str) -> Result<PathBuf, String> {
        let path = self.dir.join(name);
        if !path.exists() {
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok(path)
    }
}

/// CPU seconds used by this process's reaped children (the generators, once waited for).
fn children_cpu() -> f64 {
    // getrusage(RUSAGE_CHILDREN) without unsafe code: /proc/self/stat fields 16 and 17.
    let Ok(s) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let Some(i) = s.rfind(')') else { return 0.0 };
    let f: Vec<&str> = s[i + 2..].split_whitespace().collect();
    let ticks = |k: usize| f.get(k).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(13) + ticks(14)) / clk_tck()
}

fn clk_tck() -> f64 {
    static TCK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TCK.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// A short stable name for a script or body, from its content.
fn digest(s: &str) -> String {
    // FNV-1a: enough to tell scripts apart in one run's directory.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")
}

/// Whether the file at `path` is an executable that runs (`--version` exits 0).
pub fn runs(path: &Path) -> bool {
    std::process::Command::new(path)
        .arg("--version")
        .output()
        .map(|o| o.status.success() || !o.stdout.is_empty() || !o.stderr.is_empty())
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_figures_are_read_in_milliseconds() {
        let out = "Running 1s test\nWRKJSON {\"requests\":1000,\"duration_us\":2000000,\"connect\":0,\"read\":1,\"write\":0,\"status\":2,\"timeout\":0,\"p50\":1500,\"p99\":9000,\"p999\":12000,\"max\":20000}\n";
        let o = parse_wrk(out).unwrap();
        assert_eq!(o.requests, 1000);
        assert_eq!(o.rps, 500.0);
        assert_eq!(o.errors, 3);
        assert_eq!(
            (o.p50_ms, o.p99_ms, o.p999_ms, o.max_ms),
            (1.5, 9.0, 12.0, 20.0)
        );
    }

    #[test]
    fn oha_failures_count_status_400_and_up_and_transport_errors() {
        let out = r#"{"summary":{"successRate":1.0,"total":2.0,"slowest":0.01,"fastest":0.001,"average":0.002,"requestsPerSec":500.0},
          "latencyPercentiles":{"p50":0.001,"p99":0.004,"p99.9":0.008},
          "statusCodeDistribution":{"200":990,"502":10},"errorDistribution":{"connection closed":5,"aborted due to deadline":3}}"#;
        let o = parse_oha(out).unwrap();
        assert_eq!(o.requests, 1000);
        assert_eq!(o.errors, 15);
        assert_eq!(o.rps, 500.0);
        assert_eq!((o.p50_ms, o.p99_ms, o.p999_ms), (1.0, 4.0, 8.0));
    }

    #[test]
    fn wrk_script_escapes_and_builds_large_bodies() {
        let l = Load::post(
            "/x",
            Body::Filled {
                prefix: "{\"a\":\"".into(),
                fill: 'x',
                len: 10,
                suffix: "\"}".into(),
            },
        )
        .bearer("t\"k");
        let s = wrk_script(&l);
        assert!(s.contains("wrk.body = \"{\\\"a\\\":\\\"\" .. string.rep(\"x\", 10) .. \"\\\"}\""));
        assert!(s.contains("\"Bearer t\\\"k\""));
        assert_eq!(l.body.render().unwrap().len(), 10 + 8);
    }

    #[test]
    fn a_paid_load_pays_every_request_and_every_run_with_new_nonces() {
        let payer = Arc::new(Payer::new("http://h/t", 1_900_000_000));
        let l = Load::post("/t", Body::Text("{}".into())).paid(payer);
        assert!(!l.open_loop());
        let (a, b) = (wrk_script(&l), wrk_script(&l));
        assert_ne!(a, b, "each run a batch of its own");
        assert!(a.contains("request = function()") && a.contains("PAYMENT-SIGNATURE"));
        let header = |r: Request| {
            r.headers
                .into_iter()
                .find(|(k, _)| k == HEADER)
                .map(|(_, v)| v)
        };
        let (one, two) = (header(l.one()), header(l.one()));
        assert!(
            one.is_some() && one != two,
            "each check a payment of its own"
        );
        assert!(Load::post("/t", Body::None).open_loop());
    }

    #[test]
    fn a_rotating_load_sends_each_path_in_turn_and_checks_the_first() {
        let l = Load::get("/unused").rotating(vec!["/t/a".into(), "/t/b".into()]);
        assert_eq!(l.one().path, "/t/a");
        let s = wrk_script(&l);
        assert!(s.contains("local paths = {\"/t/a\", \"/t/b\"}"), "{s}");
        assert!(s.contains("turn = turn % #paths + 1"), "{s}");
        assert!(!wrk_script(&Load::get("/t/a")).contains("local paths"));
    }
}
