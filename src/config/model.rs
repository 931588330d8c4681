//! The validated configuration the proxy runs on. Every value here has been checked: a
//! `Duration` rather than `"5s"`, a socket address rather than a string, an index into
//! `upstreams` rather than a name that might not exist.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use http::Method;

/// A whole, valid configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it came from, for messages (`config/interlingua.toml`, `<embedded default>`).
    pub origin: String,
    pub server: ServerSettings,
    pub log: LogSettings,
    pub admin: AdminListener,
    pub listeners: Vec<Listener>,
    pub upstreams: Vec<Upstream>,
    pub routes: Vec<Route>,
}

/// Process-wide settings.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Where the task store and ledger live; created at start-up if missing.
    pub data_dir: PathBuf,
    /// Worker threads shared by the proxy and admin listeners (at least 1).
    pub threads: usize,
    /// How long in-flight requests may take to finish after SIGTERM or SIGINT.
    pub grace_period: Duration,
    /// Where dialect mapping files are looked for (`<dir>/<dialect>.toml`), before the built-ins.
    pub mappings_dir: PathBuf,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Log settings.
#[derive(Debug, Clone)]
pub struct LogSettings {
    pub format: LogFormat,
    /// A `RUST_LOG`-style filter; the `RUST_LOG` environment variable overrides it.
    pub filter: String,
    /// Whether to emit one access-log event per request.
    pub access_log: bool,
}

/// The admin listener (health, readiness, metrics).
#[derive(Debug, Clone)]
pub struct AdminListener {
    pub address: SocketAddr,
}

/// A proxy listener.
#[derive(Debug, Clone)]
pub struct Listener {
    pub address: SocketAddr,
    /// Terminate TLS here (HTTP/2 is then offered through ALPN).
    pub tls: Option<TlsFiles>,
    /// Accept cleartext HTTP/2 from clients that start with the HTTP/2 preface.
    pub h2c: bool,
}

/// PEM files for a TLS listener.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub certificate: PathBuf,
    pub key: PathBuf,
}

/// An upstream agent server.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub name: String,
    /// Host name or IP literal, resolved at start-up and refreshed in the background.
    pub host: String,
    pub port: u16,
    pub tls: bool,
    /// The TLS server name to send and verify (defaults to `host`).
    pub sni: String,
    pub verify_certificate: bool,
    /// Limit on establishing the connection (TCP, and the TLS handshake when `tls`).
    pub connect_timeout: Duration,
    /// Limit on each wait for the upstream: a silent upstream fails after this long.
    pub read_timeout: Duration,
    /// Limit on the whole upstream exchange, from connecting to the last response byte.
    pub total_timeout: Duration,
    /// Prefix of every path sent to a translated upstream ("" or "/agent").
    pub base_path: String,
}

impl Upstream {
    /// `host:port`, as written in the config.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// A dialect a route can speak on either side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dialect {
    /// No translation: requests and responses are streamed through unchanged.
    Passthrough,
    /// A dialect described by a mapping file (`mappings/<name>.toml`).
    Mapped(String),
}

impl Dialect {
    pub fn name(&self) -> &str {
        match self {
            Dialect::Passthrough => "passthrough",
            Dialect::Mapped(name) => name,
        }
    }
}

/// How strictly MIP-003 Attachment 01 input schemas are enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validation {
    /// Exactly as the reference (masumi 1.2.0), quirks included.
    Reference,
    /// Also fixes the reference's bugs (URL syntax, option membership, number parsing, …).
    Strict,
}

/// What a translated route needs beyond matching and forwarding.
#[derive(Debug, Clone)]
pub struct Translation {
    /// Per dialect, values for the mapping's `[vars]`.
    pub vars: BTreeMap<String, serde_json::Map<String, serde_json::Value>>,
    /// The input schema the agent takes (MIP-003 Attachment 01 form), when declared here.
    pub input_schema: Option<serde_json::Value>,
    pub validation: Validation,
    /// How long a front that answers only with the result waits for an asynchronous back.
    pub sync_timeout: Duration,
    /// First and longest interval between polls of an asynchronous back.
    pub poll_interval: Duration,
    pub poll_max_interval: Duration,
}

/// A route: which requests it takes, where they go, and how they are translated.
#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    pub matcher: RouteMatch,
    /// Index into `Config::upstreams`.
    pub upstream: usize,
    pub front: Dialect,
    pub back: Dialect,
    /// The largest request body accepted, in bytes.
    pub max_body: u64,
    pub translation: Translation,
}

impl Route {
    /// Whether requests are translated (rather than passed through unchanged).
    pub fn is_translated(&self) -> bool {
        self.front != Dialect::Passthrough
    }
}

/// The requests a route takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteMatch {
    /// Matched segment by segment: `/api` takes `/api` and `/api/x`, not `/apix`.
    pub path_prefix: String,
    /// Lower-case host without port; `None` takes any host.
    pub host: Option<String>,
    /// `None` takes any method.
    pub methods: Option<Vec<Method>>,
}
