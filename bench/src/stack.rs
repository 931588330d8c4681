//! Starting the contenders: the canned upstream, nginx, and interlingua processes with the configs
//! each contender needs. Every process runs on the system-under-test CPUs; every config is
//! written into the run's directory; readiness is waited for with a deadline, and a process that
//! does not come up fails the run.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::procs::{Procs, Service};

/// The subject, plan and agent every authenticated contender uses.
pub const SUBJECT: &str = "bench-client";
pub const PLAN: &str = "bench";
pub const DID: &str = "did:nv:bench";
/// The environment variable holding the HMAC secret tokens are signed with.
pub const SECRET_ENV: &str = "INTERLINGUA_BENCH_SECRET";
/// Credits granted to the subject before a contender that creates tasks starts.
pub const CREDITS: u64 = 1_000_000_000;

/// What every process of a run shares.
#[derive(Clone)]
pub struct Env {
    pub procs: Arc<Procs>,
    /// The run's scratch directory (configs, data directories, logs).
    pub dir: PathBuf,
    /// The repository (for its `mappings/`).
    pub repo: PathBuf,
    pub interlingua: PathBuf,
    pub nginx: PathBuf,
    /// This binary (it is also the canned upstream).
    pub me: PathBuf,
    /// CPUs for contenders and the upstream (a `taskset` list).
    pub sut_cpus: String,
    /// Worker threads: interlingua's `server.threads`, nginx's `worker_processes`, the
    /// upstream's.
    pub threads: u32,
    /// The PostgreSQL database interlingua's store is on; `None`: SQLite in its data directory.
    pub store_url: Option<String>,
}

/// A running process that answers HTTP on `addr`.
pub struct Running {
    pub service: Service,
    pub addr: SocketAddr,
    /// interlingua's admin listener (`/metrics`); `None` for the other processes.
    pub admin: Option<SocketAddr>,
}

/// A route of an interlingua config.
#[derive(Debug, Clone)]
pub enum Route {
    /// Forwarded unchanged.
    Passthrough { prefix: String },
    /// Nevermined clients, a MIP-003 agent: JWT, rate limit (high), credits.
    NeverminedOverMip { name: String, prefix: String },
    /// MIP-003 clients, a Nevermined agent: JWT, rate limit (high), credits.
    MipOverNevermined { name: String, prefix: String },
    /// A2A clients, a MIP-003 agent, no auth: one client blocking on its task.
    A2aOverMip { prefix: String },
    /// As `NeverminedOverMip`, and a client without a token may pay each create with x402
    /// (`exact`, [`crate::payer`]'s offer), verified and settled by `facilitator`.
    PaidNeverminedOverMip {
        name: String,
        prefix: String,
        facilitator: SocketAddr,
    },
}

/// The route names the full-pipeline contenders use (seeded tasks must name the same).
pub const NV_ROUTE: &str = "nv-over-mip";
pub const MIP_ROUTE: &str = "mip-over-nv";
pub const PAID_ROUTE: &str = "nv-over-mip-paid";

fn route_toml(r: &Route, i: usize) -> String {
    const ACCESS: &str = r#"auth = true
plans = ["bench"]
price = { hold = 1, step = 1 }
rate_limit = { per_subject = "1000000/s, burst 1000000" }
# Every poll reaches the agent (interlingua would answer polls within 250 ms of the last one from
# its store): the full pipeline is what is measured.
min_refresh = "0s""#;
    match r {
        Route::Passthrough { prefix } => format!(
            "[[routes]]\nname = \"pass-{i}\"\nmatch = {{ path_prefix = \"{prefix}\" }}\nupstream = \"canned\"\n"
        ),
        Route::NeverminedOverMip { name, prefix } => format!(
            "[[routes]]\nname = \"{name}\"\nmatch = {{ path_prefix = \"{prefix}\" }}\nupstream = \"canned\"\nfront = \"nevermined\"\nback = \"mip003\"\n{ACCESS}\n"
        ),
        Route::MipOverNevermined { name, prefix } => format!(
            "[[routes]]\nname = \"{name}\"\nmatch = {{ path_prefix = \"{prefix}\" }}\nupstream = \"canned\"\nfront = \"mip003\"\nback = \"nevermined\"\n{ACCESS}\nvars.nevermined = {{ agent_did = \"{DID}\" }}\n"
        ),
        Route::A2aOverMip { prefix } => format!(
            "[[routes]]\nname = \"a2a-blocking\"\nmatch = {{ path_prefix = \"{prefix}\" }}\nupstream = \"canned\"\nfront = \"a2a\"\nback = \"mip003\"\n"
        ),
        Route::PaidNeverminedOverMip {
            name,
            prefix,
            facilitator,
        } => format!(
            "{}{}",
            route_toml(
                &Route::NeverminedOverMip {
                    name: name.clone(),
                    prefix: prefix.clone()
                },
                i
            ),
            crate::payer::accept_toml(*facilitator)
        ),
    }
}

/// An interlingua config: one listener and admin on port 0, `threads` workers, the access log
/// at its default (on), the bench key, the canned upstream, and `routes`.
pub fn interlingua_config(
    data_dir: &Path,
    mappings: &Path,
    threads: u32,
    upstream: SocketAddr,
    routes: &[Route],
    store_url: Option<&str>,
) -> String {
    let mut s = format!(
        r#"# Written by bench/run.
[server]
data_dir = "{}"
mappings_dir = "{}"
threads = {threads}
grace_period = "2s"

[admin]
address = "127.0.0.1:0"

[auth]
[[auth.keys]]
id = "bench"
type = "hmac"
secret_env = "{SECRET_ENV}"

[[listeners]]
address = "127.0.0.1:0"

[[upstreams]]
name = "canned"
address = "{upstream}"
connect_timeout = "2s"
read_timeout = "10s"
total_timeout = "30s"

"#,
        data_dir.display(),
        mappings.display()
    );
    if let Some(url) = store_url {
        s.push_str(&format!("[store]\nurl = \"{url}\"\n\n"));
    }
    for (i, r) in routes.iter().enumerate() {
        s.push_str(&route_toml(r, i));
        s.push('\n');
    }
    s
}

/// nginx as operators run it in front of one upstream: `worker_processes` as interlingua's
/// threads, upstream keep-alive, no access log, no buffering of bodies (interlingua streams
/// passthrough bodies, so nginx streams them too, and neither touches the disk).
pub fn nginx_config(dir: &Path, workers: u32, listen: SocketAddr, upstream: SocketAddr) -> String {
    let d = dir.display();
    format!(
        r#"# Written by bench/run.
worker_processes {workers};
daemon off;
master_process on;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log warn;
worker_rlimit_nofile 65536;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    keepalive_timeout 75s;
    keepalive_requests 1000000;
    client_max_body_size 16m;
    upstream canned {{
        server {upstream};
        keepalive 256;
        keepalive_requests 1000000;
    }}
    server {{
        listen {listen};
        location / {{
            proxy_pass http://canned;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_request_buffering off;
            proxy_buffering off;
        }}
    }}
}}
"#
    )
}

fn addr_of(line: &str, word: &str) -> Option<SocketAddr> {
    let mut it = line.split_whitespace();
    it.find(|w| *w == word)?;
    it.next()?.split(',').next()?.parse().ok()
}

impl Env {
    fn limit(&self, what: &str, secs: u64) -> Duration {
        let _ = what;
        Duration::from_secs(secs)
    }

    /// Starts the canned upstream.
    pub fn upstream(&self) -> Result<Running, String> {
        self.stand_in("upstream")
    }

    /// Starts the stand-in x402 facilitator.
    pub fn facilitator(&self) -> Result<Running, String> {
        self.stand_in("facilitator")
    }

    /// Starts this binary's `what` service (`upstream`, `facilitator`) on a free port.
    fn stand_in(&self, what: &str) -> Result<Running, String> {
        let args = vec![
            what.to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--threads".into(),
            self.threads.to_string(),
        ];
        let cmd = self.procs.command(&self.sut_cpus, &self.me, &args);
        let (service, line) = self.procs.start(
            what,
            cmd,
            &self.dir.join(format!("{what}.log")),
            &format!("{what} ready:"),
            self.limit(what, 10),
        )?;
        let addr = addr_of(&line, "ready:").ok_or_else(|| format!("{what} said `{line}`"))?;
        Ok(Running {
            service,
            addr,
            admin: None,
        })
    }

    /// Starts nginx in front of `upstream`.
    pub fn nginx(&self, upstream: SocketAddr) -> Result<Running, String> {
        let dir = self.dir.join("nginx");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let port = crate::http::free_port().map_err(|e| e.to_string())?;
        let listen: SocketAddr = ([127, 0, 0, 1], port).into();
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, nginx_config(&dir, self.threads, listen, upstream))
            .map_err(|e| e.to_string())?;
        let args = vec![
            "-p".to_string(),
            dir.display().to_string(),
            "-e".into(),
            dir.join("nginx-error.log").display().to_string(),
            "-c".into(),
            conf.display().to_string(),
        ];
        let cmd = self.procs.command(&self.sut_cpus, &self.nginx, &args);
        let mut service = self
            .procs
            .start_quiet("nginx", cmd, &dir.join("nginx.stderr"))?;
        if !crate::http::wait_listening(listen, Duration::from_secs(10)) || !service.running() {
            let log = crate::procs::tail_of(&dir.join("nginx-error.log"), 10);
            let err = crate::procs::tail_of(&dir.join("nginx.stderr"), 10);
            return Err(format!("nginx did not start on {listen}:\n{err}\n{log}"));
        }
        Ok(Running {
            service,
            addr: listen,
            admin: None,
        })
    }

    /// Writes the config of an interlingua contender named `name` (its own directory and data
    /// directory) and returns the config's path.
    pub fn interlingua_dir(
        &self,
        name: &str,
        upstream: SocketAddr,
        routes: &[Route],
    ) -> Result<PathBuf, String> {
        let dir = self.dir.join(name);
        let data = dir.join("data");
        std::fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
        let config = dir.join("interlingua.toml");
        let text = interlingua_config(
            &data,
            &self.repo.join("mappings"),
            self.threads,
            upstream,
            routes,
            self.store_url.as_deref(),
        );
        std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
        Ok(config)
    }

    /// Runs an `interlingua` command (not `serve`) on `config`, returning what it printed.
    pub fn cli(&self, config: &Path, args: &[&str]) -> Result<String, String> {
        let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        all.push("-c".into());
        all.push(config.display().to_string());
        let cmd = self.procs.command(&self.sut_cpus, &self.interlingua, &all);
        self.procs
            .run("interlingua-cli", cmd, Duration::from_secs(60))
    }

    /// Grants the bench subject credits on `config`'s store (before the proxy starts).
    pub fn grant(&self, config: &Path) -> Result<(), String> {
        let amount = CREDITS.to_string();
        self.cli(
            config,
            &[
                "credits",
                "grant",
                "--plan",
                PLAN,
                "--subject",
                SUBJECT,
                "--amount",
                &amount,
            ],
        )
        .map(|_| ())
    }

    /// A token for the bench subject and plan, valid for a day.
    pub fn token(&self, config: &Path) -> Result<String, String> {
        let out = self.cli(
            config,
            &[
                "token", "mint", "--sub", SUBJECT, "--plan", PLAN, "--ttl", "24h",
            ],
        )?;
        out.split_whitespace()
            .last()
            .map(str::to_string)
            .ok_or_else(|| "token mint printed nothing".to_string())
    }

    /// Starts `interlingua serve` on `config`; `within` bounds the start-up (a config with many
    /// routes takes longer to check).
    pub fn serve(&self, name: &str, config: &Path, within: Duration) -> Result<Running, String> {
        self.serve_under(name, config, within, &[])
    }

    /// As [`Env::serve`], the process started by `wrapper` (a program and its arguments, e.g.
    /// valgrind's), which runs interlingua and passes its output through.
    pub fn serve_under(
        &self,
        name: &str,
        config: &Path,
        within: Duration,
        wrapper: &[String],
    ) -> Result<Running, String> {
        let mut args: Vec<String> = wrapper.iter().skip(1).cloned().collect();
        let program = match wrapper.first() {
            Some(p) => {
                args.push(self.interlingua.display().to_string());
                PathBuf::from(p)
            }
            None => self.interlingua.clone(),
        };
        args.extend([
            "serve".to_string(),
            "-c".into(),
            config.display().to_string(),
        ]);
        let cmd = self.procs.command(&self.sut_cpus, &program, &args);
        let log = config.with_file_name("interlingua.log");
        let (service, line) = self
            .procs
            .start(name, cmd, &log, "interlingua ready:", within)?;
        let addr = addr_of(&line, "proxy").ok_or_else(|| format!("{name} said `{line}`"))?;
        Ok(Running {
            service,
            addr,
            admin: addr_of(&line, "admin"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_lines_give_their_addresses() {
        let l = "interlingua ready: proxy 127.0.0.1:4100,127.0.0.1:4101 admin 127.0.0.1:9901";
        assert_eq!(addr_of(l, "proxy"), Some("127.0.0.1:4100".parse().unwrap()));
        assert_eq!(addr_of(l, "admin"), Some("127.0.0.1:9901".parse().unwrap()));
        assert_eq!(
            addr_of("upstream ready: 127.0.0.1:5", "ready:"),
            Some("127.0.0.1:5".parse().unwrap())
        );
    }

    #[test]
    fn a_config_with_every_kind_of_route_is_one_interlingua_accepts() {
        std::env::set_var(SECRET_ENV, "a-secret-for-the-config-check");
        let mappings = Path::new(env!("CARGO_MANIFEST_DIR")).join("../mappings");
        let mut routes = vec![
            Route::NeverminedOverMip {
                name: NV_ROUTE.into(),
                prefix: "/nv".into(),
            },
            Route::MipOverNevermined {
                name: MIP_ROUTE.into(),
                prefix: "/mip".into(),
            },
            Route::PaidNeverminedOverMip {
                name: PAID_ROUTE.into(),
                prefix: "/paid".into(),
                facilitator: "127.0.0.1:2".parse().unwrap(),
            },
        ];
        routes.extend((0..3).map(|i| Route::Passthrough {
            prefix: format!("/api/v1/agents/did:nv:r{i}"),
        }));
        let text = interlingua_config(
            Path::new("/tmp/d"),
            &mappings,
            1,
            "127.0.0.1:1".parse().unwrap(),
            &routes,
            Some("postgres://bench@127.0.0.1:5432/bench"),
        );
        if let Err(problems) = interlingua::setup::parse(&text, "bench") {
            let all: Vec<String> = problems.0.iter().map(ToString::to_string).collect();
            panic!("{}\n{text}", all.join("\n"));
        }
    }
}
