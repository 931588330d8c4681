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
    pub store: StoreSettings,
    pub log: LogSettings,
    pub admin: AdminListener,
    pub listeners: Vec<Listener>,
    pub upstreams: Vec<Upstream>,
    pub routes: Vec<Route>,
    pub auth: Option<Auth>,
    /// `[limits] redis`: rate limits shared through Redis; `None`: each instance counts alone.
    pub shared_limits: Option<SharedLimits>,
    /// `[telemetry] otlp_endpoint`: traces exported over OTLP; `None`: no traces.
    pub telemetry: Option<Telemetry>,
}

/// Process-wide settings.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Where the task store and ledger live; created at start-up if missing.
    pub data_dir: PathBuf,
    /// Worker threads shared by the proxy and admin listeners (at least 1).
    pub threads: usize,
    /// Idle upstream connections kept for reuse, per worker thread (at least 1).
    pub upstream_keepalive: usize,
    /// How long in-flight requests may take to finish after SIGTERM or SIGINT.
    pub grace_period: Duration,
    /// Where dialect mapping files are looked for (`<dir>/<dialect>.toml`), before the built-ins.
    pub mappings_dir: PathBuf,
    /// A connection's first request header must be whole within this long of its opening, a
    /// later one within this long of its first byte (past it: 408 and close; a connection that
    /// sent nothing is closed without an answer).
    pub client_header_timeout: Duration,
    /// The longest wait for the next piece of a request body; past it: 408 and close.
    pub client_body_timeout: Duration,
    /// How long a client connection may sit idle between two requests before it is closed.
    pub keepalive_timeout: Duration,
    /// Client connections open at once on each proxy listener; one more is refused (503, close).
    pub max_connections: usize,
    /// The key behind the tokens the mappings' `seal` makes and `unseal` reads (from
    /// `seal_key_env`); `None`: each process makes its own, so tokens do not cross instances or
    /// restarts.
    pub seal_key: Option<SealKey>,
    /// Reload when the config file or a mapping file changes (SIGHUP and the admin API reload
    /// whatever this says).
    pub watch_config: bool,
}

/// The secret behind sealed tokens: at least [`SealKey::MIN_LEN`] bytes. Its `Debug` shows only
/// the length, so a logged config never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct SealKey(pub std::sync::Arc<[u8]>);

impl SealKey {
    /// HMAC-SHA256's own output size: a shorter key is easier to guess than the MAC.
    pub const MIN_LEN: usize = 32;
}

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SealKey({} bytes)", self.0.len())
    }
}

/// Where tasks and credits live, and how instances share them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSettings {
    pub backend: StoreBackend,
    /// How long an instance's lease on the tasks it follows lasts without renewal: the longest a
    /// task goes unwatched after its instance dies.
    pub lease_ttl: Duration,
    /// Whether start-up applies pending schema migrations (otherwise it refuses to start until
    /// `interlingua migrate` has).
    pub migrate_on_start: bool,
}

impl Default for StoreSettings {
    fn default() -> StoreSettings {
        StoreSettings {
            backend: StoreBackend::Sqlite,
            lease_ttl: Duration::from_secs(15),
            migrate_on_start: true,
        }
    }
}

/// The store's backend.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreBackend {
    /// SQLite in `server.data_dir`: one instance.
    Sqlite,
    /// PostgreSQL, shared by every instance naming it.
    Postgres {
        /// Without a password.
        url: String,
        /// From the environment variable `store.password_env` names.
        password: Option<String>,
        /// Connections each instance keeps at most.
        pool_size: usize,
    },
}

impl std::fmt::Debug for StoreBackend {
    // Never the password: configs are printed in logs and test failures.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreBackend::Sqlite => f.write_str("Sqlite"),
            StoreBackend::Postgres {
                url,
                password,
                pool_size,
            } => f
                .debug_struct("Postgres")
                .field("url", url)
                .field(
                    "password",
                    &password.as_ref().map(|_| "<from the environment>"),
                )
                .field("pool_size", pool_size)
                .finish(),
        }
    }
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
#[derive(Debug, Clone, PartialEq)]
pub struct LogSettings {
    pub format: LogFormat,
    /// A `RUST_LOG`-style filter; the `RUST_LOG` environment variable overrides it.
    pub filter: String,
    /// Whether to emit one access-log event per request.
    pub access_log: bool,
}

/// Traces: one span per request and per call it makes, exported over OTLP/HTTP (protobuf).
#[derive(Debug, Clone, PartialEq)]
pub struct Telemetry {
    /// The collector's traces endpoint, used as written (`http://127.0.0.1:4318/v1/traces`).
    pub otlp_endpoint: String,
    /// The share of traces begun here that are kept, from 0 to 1. A request whose client sent a
    /// `traceparent` is kept or not as its sampled flag says.
    pub sample_ratio: f64,
    /// The `service.name` the spans are exported under.
    pub service_name: String,
}

/// The admin listener (health, readiness, metrics, and the credits and task API).
#[derive(Debug, Clone, PartialEq)]
pub struct AdminListener {
    pub address: SocketAddr,
    /// The bearer token the credits and task API require; without one that API is off.
    pub token: Option<String>,
}

/// How bearer tokens are verified.
#[derive(Debug, Clone, PartialEq)]
pub struct Auth {
    /// Tolerance on `exp` and `nbf`.
    pub leeway: Duration,
    /// Longer tokens are refused before any parsing.
    pub max_token_size: usize,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    /// Where the subject and the plan are in the claims.
    pub subject_claim: ClaimPath,
    pub plan_claim: ClaimPath,
    /// Accept an `iat` later than now plus `leeway` (refused by default: a token from the future
    /// was minted by a wrong clock or for a replay later).
    pub allow_future_iat: bool,
    /// Read a claim named twice as its last value (refused by default: two readers of the same
    /// token could see two different plans).
    pub allow_duplicate_claims: bool,
    pub keys: Vec<Key>,
    /// Routes with auth publish these authorization servers (RFC 9728) unless they name their
    /// own; empty: none published.
    pub authorization_servers: Vec<String>,
    /// The scopes published with them, unless a route names its own.
    pub scopes_supported: Vec<String>,
    /// The public origin resource URLs are named under (`https://gw.example.com`, no trailing
    /// `/`); `None`: the request's own scheme and `Host`.
    pub resource_base: Option<String>,
}

/// A claim's place: `sub`, `org.plan` (nested), or a JSON pointer `/https:~1~1example.com~1plan`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimPath(pub Vec<String>);

impl ClaimPath {
    pub fn parse(text: &str) -> ClaimPath {
        if let Some(pointer) = text.strip_prefix('/') {
            ClaimPath(
                pointer
                    .split('/')
                    .map(|p| p.replace("~1", "/").replace("~0", "~"))
                    .collect(),
            )
        } else {
            ClaimPath(text.split('.').map(str::to_string).collect())
        }
    }

    pub fn as_text(&self) -> String {
        self.0.join(".")
    }
}

/// A verification key.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    /// Matched with a token's `kid`.
    pub id: String,
    pub kind: KeyKind,
    /// The algorithms a token verified with this key may use (never `none`).
    pub algorithms: Vec<jsonwebtoken::Algorithm>,
}

/// Where a key comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyKind {
    /// An HMAC secret, from an environment variable.
    Hmac { secret: Vec<u8> },
    /// A public key from a PEM file (the private key, when given, only mints development tokens).
    Pem {
        family: KeyFamily,
        public: Vec<u8>,
        private_key_file: Option<PathBuf>,
    },
    /// A JSON Web Key Set, from a file or a URL; refreshed on an unknown `kid`, at most once per
    /// `refresh_interval`.
    Jwks {
        source: JwksSource,
        refresh_interval: Duration,
    },
}

/// The public-key families.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFamily {
    Rsa,
    Ec,
    Ed25519,
}

/// Where a key set is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    File(PathBuf),
    Url(String),
}

/// Who may use a route, how often, and what it sends upstream about them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Access {
    /// A verified bearer token is required.
    pub auth: bool,
    /// Plans allowed; empty means any.
    pub plans: Vec<String>,
    pub limits: RateLimits,
    pub upstream_auth: Option<UpstreamAuth>,
    pub identity_headers: Option<IdentityHeaders>,
    /// What the route publishes about getting a token (RFC 9728), on routes with auth whose
    /// authorization servers are configured.
    pub metadata: Option<ResourceMetadata>,
}

/// A protected route's RFC 9728 metadata: where a client gets a token for it, and which scopes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceMetadata {
    /// Issuer URLs, as configured (at least one; compared by clients character for character,
    /// so never rewritten).
    pub authorization_servers: Vec<String>,
    /// May be empty.
    pub scopes: Vec<String>,
}

/// Rate limits of a route.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RateLimits {
    pub per_subject: Option<Quota>,
    pub route: Option<Quota>,
    pub per_client: Option<Quota>,
}

impl RateLimits {
    /// Whether the route has no limit at all.
    pub fn is_empty(&self) -> bool {
        self.per_subject.is_none() && self.route.is_none() && self.per_client.is_none()
    }
}

/// Rate limits kept in Redis, shared by every instance that names the same server.
#[derive(Clone)]
pub struct SharedLimits {
    /// The server, password included (from the URL or `redis_password_env`).
    pub redis: redis::ConnectionInfo,
    /// The URL as configured, without its password: for messages.
    pub display: String,
    pub on_error: OnRedisError,
    /// The longest a check waits for Redis before `on_error` applies.
    pub timeout: Duration,
}

impl std::fmt::Debug for SharedLimits {
    // The connection info holds the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLimits")
            .field("redis", &self.display)
            .field("on_error", &self.on_error)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// What a request meets when Redis cannot be asked (`on_redis_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRedisError {
    /// Each instance's own limits decide (a fleet of N then allows up to N times the quota).
    Local,
    /// The request is refused with 503 and a `Retry-After`.
    Deny,
}

impl OnRedisError {
    /// `local` or `deny`, as in the config and the metric's `mode` label.
    pub fn as_str(self) -> &'static str {
        match self {
            OnRedisError::Local => "local",
            OnRedisError::Deny => "deny",
        }
    }
}

/// "10/s, burst 20": `count` requests per `per`, and up to `burst` at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    pub count: u32,
    pub per: Duration,
    pub burst: u32,
}

/// The credential interlingua sends to the agent (the client's own token never goes upstream).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamAuth {
    pub header: String,
    pub value: String,
}

/// Header names for the verified identity, sent upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityHeaders {
    pub subject: String,
    pub plan: String,
}

/// What a route charges, in credits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Price {
    /// Held when a task is created (its estimated cost); 402 when the balance cannot cover it.
    pub hold: u64,
    /// Per completed step (per task, for backs without steps of their own).
    pub step: u64,
    /// Bounds on a step's cost.
    pub min: u64,
    pub max: u64,
    pub from: PriceFrom,
    /// What a failed step costs (default nothing).
    pub failed: u64,
    /// A fee per successful call of an operation on a task (`provide_input = 1`), charged once per
    /// request id.
    pub operations: BTreeMap<mapping::task::Operation, u64>,
}

impl Price {
    /// What a task created now keeps of this price, to settle its steps by.
    pub fn step_price(&self) -> mapping::task::StepPrice {
        mapping::task::StepPrice {
            step: self.step,
            from_agent: self.from == PriceFrom::Agent,
            min: self.min,
            max: self.max,
            failed: self.failed,
            per_task: false,
        }
    }
}

/// Where a step's cost comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriceFrom {
    /// The route's `step` price.
    Route,
    /// What the agent reports for the step (its `cost`), clamped to [min, max].
    Agent,
}

/// A proxy listener.
#[derive(Debug, Clone, PartialEq)]
pub struct Listener {
    pub address: SocketAddr,
    /// Terminate TLS here (HTTP/2 is then offered through ALPN).
    pub tls: Option<TlsFiles>,
    /// Accept cleartext HTTP/2 from clients that start with the HTTP/2 preface.
    pub h2c: bool,
}

/// PEM files for a TLS listener.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsFiles {
    pub certificate: PathBuf,
    pub key: PathBuf,
}

/// An upstream agent server.
#[derive(Debug, Clone, PartialEq)]
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
#[derive(Debug, Clone, PartialEq)]
pub struct Translation {
    /// Per dialect, values for the mapping's `[vars]`.
    pub vars: BTreeMap<String, serde_json::Map<String, serde_json::Value>>,
    /// The input schema the agent takes (MIP-003 Attachment 01 form), when declared here.
    pub input_schema: Option<serde_json::Value>,
    /// What the agent does, for discovery documents.
    pub description: Option<String>,
    pub validation: Validation,
    /// How long a front that answers only with the result waits for an asynchronous back.
    pub sync_timeout: Duration,
    /// First and longest interval between polls of an asynchronous back.
    pub poll_interval: Duration,
    pub poll_max_interval: Duration,
    /// How long a task may wait for input (or for its payment) before it is cancelled as
    /// `expired`, its hold released.
    pub input_timeout: Duration,
    /// Polls of one task within this long of the last refresh from the back are answered from
    /// the store (many clients polling one task cause one call to the agent).
    pub min_refresh: Duration,
    /// How long an agent may say it does not know a task it is following (404 or 410 to its
    /// `get_task`: it restarted and lost it, say) before the task fails as `upstream_lost`, its
    /// hold released.
    pub lost_after: Duration,
    /// The deepest a request body may nest, arrays and objects counted (1 to
    /// [`MAX_JSON_DEPTH`](mapping::depth::MAX_JSON_DEPTH)): deeper is refused (400) before
    /// anything is held or stored.
    pub max_json_depth: usize,
}

/// A route: which requests it takes, where they go, and how they are translated.
#[derive(Debug, Clone, PartialEq)]
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
    pub access: Access,
    pub price: Option<Price>,
    /// The service interlingua pays the agent through, when the agent charges on its own rail.
    pub payment: Option<PaymentService>,
    /// What a client may pay with x402 instead of presenting a token.
    pub x402: Option<X402Accept>,
    /// What interlingua may pay an agent that answers a call with 402 (x402).
    pub x402_pay: Option<X402Pay>,
    /// The Masumi payment node this route's jobs are sold on, to buyers without a token.
    pub sell: Option<MasumiSeller>,
}

/// A route's `payment.pay.x402`: the wallet interlingua pays agents from, and the policy no
/// payment leaves: an offer outside it is never signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct X402Pay {
    /// The wallet's private key, from the environment (checked: a valid secp256k1 key).
    pub key: SecretKey,
    /// CAIP-2 networks (`eip155:<chain id>`) a payment may be made on.
    pub networks: Vec<String>,
    /// Token contracts a payment may be made in, lower-case (addresses compare so).
    pub assets: Vec<String>,
    /// The most one call may cost, in the assets' atomic units (at most `i64::MAX`).
    pub max_per_call: u64,
    /// The most a task's payments may add up to, in the same units (at most `i64::MAX`).
    pub max_per_task: u64,
}

/// A secret read from the environment. Its Debug never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretKey(pub String);

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey(…)")
    }
}

/// A route's `payment.accept.x402`: where payments are verified and settled, and what it asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct X402Accept {
    /// The facilitator's base URL, without a trailing slash.
    pub facilitator: String,
    /// The `Authorization` header the facilitator is called with.
    pub facilitator_auth: Option<String>,
    /// At most one per scheme and network.
    pub offers: Vec<X402Offer>,
}

/// How an x402 payment is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum X402Scheme {
    /// One fixed amount per call, authorised by EIP-3009 and settled at the call.
    Exact,
    /// A signed maximum (through Permit2); what the task's completed steps cost, up to it, is
    /// settled once when the task ends.
    Upto,
}

impl X402Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            X402Scheme::Exact => "exact",
            X402Scheme::Upto => "upto",
        }
    }
}

/// One offer of a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct X402Offer {
    pub scheme: X402Scheme,
    /// CAIP-2, e.g. `eip155:8453`.
    pub network: String,
    /// The token contract, `0x` and 40 hex digits.
    pub asset: String,
    /// The token's EIP-712 domain: the client signs over it, and the chain checks it.
    pub asset_name: String,
    pub asset_version: String,
    /// Who is paid: the operator's address.
    pub pay_to: String,
    /// Atomic units of `asset` per call (`exact`), or the most one task may cost (`upto`): what
    /// the client authorises. At most `i64::MAX`, the ledger's range.
    pub amount: u64,
    /// `upto`: what each completed step costs (0 for `exact`).
    pub per_step: u64,
    /// `upto`: the facilitator's address, named in the requirements' `extra`.
    pub facilitator_address: Option<String>,
    /// How long a client's authorisation is valid (`maxTimeoutSeconds`).
    pub max_timeout_seconds: u64,
}

/// A payment service on the operator's account, through which interlingua buys jobs from agents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaymentService {
    /// A Masumi payment service: purchases locked in Cardano escrow.
    Masumi(MasumiService),
}

/// The operator's Masumi payment service (purchaser side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasumiService {
    /// The API base, without a trailing slash (`…/api/v1`).
    pub url: String,
    /// Its API key, sent as the header `token`.
    pub token: String,
    pub network: MasumiNetwork,
    /// How long after `payByTime` an unlocked purchase is given up.
    pub lock_grace: Duration,
}

/// A route's `payment.accept.masumi`: the operator's Masumi payment node, on which the route's
/// jobs are sold (the seller side), and the payment requests' windows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasumiSeller {
    /// The node's API base, without a trailing slash (`…/api/v1`), its key and network.
    pub node: MasumiService,
    /// The agent's identifier in the registry (policy id and asset name, hex).
    pub agent_identifier: String,
    /// The longest the agent may take, from the buyer's lock to its result.
    pub max_run: Duration,
    /// `payByTime` and `submitResultTime`, from `start_job`.
    pub pay_by: Duration,
    pub submit_result_by: Duration,
    /// `unlockTime` and `externalDisputeUnlockTime`, from `start_job`; `None`: the node's.
    pub unlock_after: Option<Duration>,
    pub dispute_unlock_after: Option<Duration>,
    /// How often a sale whose job has ended is asked for the chain's verdict.
    pub verdict_every: Duration,
    /// The selling wallet's key when the node's answer does not name it.
    pub seller_vkey: Option<String>,
    /// `RequestedFunds` (dynamic pricing): `(amount, unit)`; empty for fixed pricing.
    pub amounts: Vec<(String, String)>,
}

/// A Cardano network, as the Masumi payment service spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MasumiNetwork {
    /// The test network.
    Preprod,
    /// The main network.
    Mainnet,
}

impl MasumiNetwork {
    pub fn name(self) -> &'static str {
        match self {
            MasumiNetwork::Preprod => "Preprod",
            MasumiNetwork::Mainnet => "Mainnet",
        }
    }
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
