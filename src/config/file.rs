//! The configuration file as written: serde structs that mirror the TOML, one per table.
//!
//! Every struct refuses unknown keys, so a typo is an error rather than a silently ignored
//! setting. Values that need checking beyond their type (addresses, durations, names that
//! refer to other tables) stay `Spanned` strings here, so that `validate` can point at them.

use serde::Deserialize;
use toml::Spanned;

/// `[server]`: process-wide settings.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    pub data_dir: Option<Spanned<String>>,
    pub threads: Option<Spanned<i64>>,
    pub upstream_keepalive: Option<Spanned<i64>>,
    pub grace_period: Option<Spanned<String>>,
    pub mappings_dir: Option<Spanned<String>>,
    pub client_header_timeout: Option<Spanned<String>>,
    pub client_body_timeout: Option<Spanned<String>>,
    pub keepalive_timeout: Option<Spanned<String>>,
    pub max_connections: Option<Spanned<i64>>,
    /// The environment variable holding the key behind the mappings' sealed tokens.
    pub seal_key_env: Option<Spanned<String>>,
    pub watch_config: Option<bool>,
}

/// `[store]`: where tasks and credits live.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    pub url: Option<Spanned<String>>,
    /// The environment variable holding PostgreSQL's password.
    pub password_env: Option<Spanned<String>>,
    pub pool_size: Option<Spanned<i64>>,
    pub lease_ttl: Option<Spanned<String>>,
    pub migrate_on_start: Option<bool>,
}

/// `[log]`: log output.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSection {
    pub format: Option<LogFormatName>,
    pub filter: Option<Spanned<String>>,
    pub access_log: Option<bool>,
}

/// `[telemetry]`: traces, exported over OTLP/HTTP.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySection {
    /// The collector's traces endpoint (`http://host:4318/v1/traces`); absent: no traces.
    pub otlp_endpoint: Option<Spanned<String>>,
    pub sample_ratio: Option<Spanned<f64>>,
    pub service_name: Option<Spanned<String>>,
}

/// The log formats a user can name.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormatName {
    Text,
    Json,
}

/// `[admin]`: the admin listener.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSection {
    pub address: Spanned<String>,
    /// The environment variable holding the admin API's bearer token.
    pub token_env: Option<Spanned<String>>,
}

/// `[limits]`: rate limits shared by several instances through Redis.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// `redis://[user:password@]host:port[/db]`.
    pub redis: Option<Spanned<String>>,
    /// The environment variable holding Redis's password (instead of one in the URL).
    pub redis_password_env: Option<Spanned<String>>,
    /// `local` or `deny`.
    pub on_redis_error: Option<Spanned<String>>,
    /// The longest a check waits for Redis.
    pub redis_timeout: Option<Spanned<String>>,
}

/// `[auth]`: how bearer tokens are verified.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    pub leeway: Option<Spanned<String>>,
    pub max_token_size: Option<Spanned<String>>,
    pub issuer: Option<Spanned<String>>,
    pub audience: Option<Spanned<String>>,
    pub subject_claim: Option<Spanned<String>>,
    pub plan_claim: Option<Spanned<String>>,
    pub allow_future_iat: Option<bool>,
    pub allow_duplicate_claims: Option<bool>,
    /// RFC 9728: where clients get tokens for the routes with auth (issuer URLs).
    pub authorization_servers: Option<Vec<Spanned<String>>>,
    /// RFC 9728: the scopes those routes' tokens may carry, as published.
    pub scopes_supported: Option<Vec<Spanned<String>>>,
    /// The public origin (`https://gw.example.com`) resource URLs are named under, when it is not
    /// the request's own scheme and `Host` (behind a TLS-terminating load balancer).
    pub resource_base: Option<Spanned<String>>,
    #[serde(default)]
    pub keys: Vec<Spanned<KeyEntry>>,
}

/// One `[[auth.keys]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    pub id: Spanned<String>,
    #[serde(rename = "type")]
    pub kind: Spanned<String>,
    pub algorithms: Option<Vec<Spanned<String>>>,
    pub secret_env: Option<Spanned<String>>,
    pub pem_file: Option<Spanned<String>>,
    pub private_key_file: Option<Spanned<String>>,
    pub jwks_file: Option<Spanned<String>>,
    pub jwks_url: Option<Spanned<String>>,
    pub refresh_interval: Option<Spanned<String>>,
}

/// A route's `price`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceEntry {
    pub hold: Option<Spanned<u64>>,
    pub step: Option<Spanned<u64>>,
    pub min: Option<Spanned<u64>>,
    pub max: Option<Spanned<u64>>,
    pub from: Option<Spanned<String>>,
    pub failed: Option<Spanned<u64>>,
    pub operations: Option<Spanned<std::collections::BTreeMap<String, u64>>>,
}

/// A route's `rate_limit`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitEntry {
    pub per_subject: Option<Spanned<String>>,
    pub route: Option<Spanned<String>>,
    pub per_client: Option<Spanned<String>>,
}

/// A route's `upstream_auth`: the credential interlingua sends to the agent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamAuthEntry {
    pub bearer_env: Option<Spanned<String>>,
    pub header: Option<Spanned<String>>,
    pub value_env: Option<Spanned<String>>,
}

/// A route's `identity_headers`: where the verified subject and plan go upstream.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityHeadersEntry {
    pub subject: Option<Spanned<String>>,
    pub plan: Option<Spanned<String>>,
}

/// One `[[listeners]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerEntry {
    pub address: Spanned<String>,
    pub tls: Option<TlsFiles>,
    pub h2c: Option<bool>,
}

/// A listener's certificate chain and private key, both PEM files.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    pub certificate: Spanned<String>,
    pub key: Spanned<String>,
}

/// One `[[upstreams]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamEntry {
    pub name: Spanned<String>,
    pub address: Spanned<String>,
    pub tls: Option<bool>,
    pub sni: Option<Spanned<String>>,
    pub verify_certificate: Option<bool>,
    pub connect_timeout: Option<Spanned<String>>,
    pub read_timeout: Option<Spanned<String>>,
    pub total_timeout: Option<Spanned<String>>,
    pub base_path: Option<Spanned<String>>,
}

/// One `[[routes]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteEntry {
    pub name: Option<Spanned<String>>,
    #[serde(rename = "match")]
    pub matcher: MatchEntry,
    pub upstream: Spanned<String>,
    pub front: Option<Spanned<String>>,
    pub back: Option<Spanned<String>>,
    pub max_body: Option<Spanned<String>>,
    /// The deepest a request body may nest (arrays and objects), on translated routes.
    pub max_json_depth: Option<Spanned<i64>>,
    /// Per dialect, values for its mapping's `[vars]`: `vars.mip003 = { text_field = "query" }`.
    pub vars: Option<Spanned<toml::Table>>,
    /// The agent's input schema (MIP-003 Attachment 01), as a table.
    pub input_schema: Option<Spanned<toml::Table>>,
    /// What the agent does, for discovery documents (agent cards, LMOS descriptions).
    pub description: Option<String>,
    pub validation: Option<Spanned<String>>,
    pub sync_timeout: Option<Spanned<String>>,
    pub poll_interval: Option<Spanned<String>>,
    pub poll_max_interval: Option<Spanned<String>>,
    pub input_timeout: Option<Spanned<String>>,
    pub min_refresh: Option<Spanned<String>>,
    pub lost_after: Option<Spanned<String>>,
    /// Require a verified bearer token.
    pub auth: Option<bool>,
    /// The plans allowed (empty or absent: any plan).
    pub plans: Option<Vec<Spanned<String>>>,
    pub price: Option<Spanned<PriceEntry>>,
    pub rate_limit: Option<RateLimitEntry>,
    pub upstream_auth: Option<Spanned<UpstreamAuthEntry>>,
    pub identity_headers: Option<IdentityHeadersEntry>,
    /// This route's own RFC 9728 metadata, instead of `[auth]`'s.
    pub auth_metadata: Option<Spanned<AuthMetadataEntry>>,
    /// The operator's payment service, through which interlingua pays an agent that charges
    /// on a rail of its own (`payment = { masumi = { … } }`).
    pub payment: Option<Spanned<PaymentEntry>>,
}

/// A route's `auth_metadata`: what it publishes about getting a token, each key replacing
/// `[auth]`'s.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthMetadataEntry {
    pub authorization_servers: Option<Vec<Spanned<String>>>,
    pub scopes: Option<Vec<Spanned<String>>>,
}

/// A route's `payment`: the rail interlingua pays the agent on (`masumi`, or `pay` for agents
/// that ask per call), and what it takes from clients that pay on the wire (`accept`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentEntry {
    pub masumi: Option<Spanned<MasumiEntry>>,
    pub accept: Option<Spanned<AcceptEntry>>,
    pub pay: Option<Spanned<PayEntry>>,
}

/// `payment.pay`: the rails interlingua pays an agent on when the agent asks for payment in
/// its answer to a call.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayEntry {
    pub x402: Option<Spanned<X402PayEntry>>,
}

/// `payment.pay.x402`: the wallet interlingua pays from, and what it may pay.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct X402PayEntry {
    /// The variable holding the wallet's private key (hex): never the config itself.
    pub key_env: Spanned<String>,
    /// CAIP-2 networks a payment may be made on (`eip155:8453`).
    pub networks: Spanned<Vec<Spanned<String>>>,
    /// Token contracts a payment may be made in.
    pub assets: Spanned<Vec<Spanned<String>>>,
    /// The most one call may cost, in the assets' atomic units.
    pub max_per_call: Spanned<u64>,
    /// The most one task's calls may cost together, in the same units.
    pub max_per_task: Spanned<u64>,
}

/// `payment.accept`: the rails a client may pay this route on, instead of holding a plan.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceptEntry {
    pub x402: Option<Spanned<X402AcceptEntry>>,
    pub masumi: Option<Spanned<MasumiSellEntry>>,
}

/// `payment.accept.masumi`: the operator's Masumi payment node, on which interlingua sells this
/// route's jobs to Masumi purchasers (the seller side).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MasumiSellEntry {
    /// Its API base, e.g. `http://127.0.0.1:3001/api/v1`.
    pub url: Spanned<String>,
    /// The variable holding its API key (a key with `canPay`; following a payment needs
    /// `canRead`, which such a key has).
    pub token_env: Spanned<String>,
    /// `Preprod` or `Mainnet`.
    pub network: Option<Spanned<String>>,
    /// The agent's identifier in the Masumi registry: its NFT's policy id and asset name, hex.
    pub agent_identifier: Spanned<String>,
    /// The longest the route's agent may take, from the buyer's lock to its result.
    pub max_run: Spanned<String>,
    /// How long a buyer has to lock the funds (`payByTime`, from `start_job`).
    pub pay_by: Option<Spanned<String>>,
    /// By when the result must be submitted (`submitResultTime`, from `start_job`).
    pub submit_result_by: Option<Spanned<String>>,
    /// `unlockTime` and `externalDisputeUnlockTime`, from `start_job`; by default the node's.
    pub unlock_after: Option<Spanned<String>>,
    pub dispute_unlock_after: Option<Spanned<String>>,
    /// How long after `payByTime` the node still takes a lock it sees late.
    pub lock_grace: Option<Spanned<String>>,
    /// How often a sale whose job has ended is asked for the chain's verdict.
    pub verdict_every: Option<Spanned<String>>,
    /// The selling wallet's key, for a node whose answer does not name it.
    pub seller_vkey: Option<Spanned<String>>,
    /// The price, for an agent registered with dynamic pricing only (the node's fixed price is
    /// authoritative otherwise).
    pub amounts: Option<Vec<Spanned<MasumiAmountEntry>>>,
}

/// One amount of a dynamic price: `{ amount = "5000000", unit = "" }` (`""` is lovelace).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MasumiAmountEntry {
    pub amount: Spanned<String>,
    #[serde(default)]
    pub unit: String,
}

/// `payment.accept.x402`: the facilitator that verifies and settles, and the offers.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct X402AcceptEntry {
    /// The facilitator's base URL (`/verify` and `/settle` below it).
    pub facilitator: Spanned<String>,
    /// The variable holding the facilitator's `Authorization` header value, if it wants one.
    pub facilitator_auth_env: Option<Spanned<String>>,
    pub offers: Spanned<Vec<Spanned<X402OfferEntry>>>,
}

/// One `payment.accept.x402.offers` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct X402OfferEntry {
    /// `exact` or `upto`.
    pub scheme: Spanned<String>,
    /// CAIP-2 (`eip155:8453`).
    pub network: Spanned<String>,
    /// The token contract.
    pub asset: Spanned<String>,
    /// The token's EIP-712 domain name and version (`USDC`, `2`).
    pub asset_name: Spanned<String>,
    pub asset_version: Spanned<String>,
    /// The operator's address.
    pub pay_to: Spanned<String>,
    /// `exact`: the price of a call, in the asset's atomic units.
    pub per_call: Option<Spanned<u64>>,
    /// `upto`: the price of a completed step, and the most one task may cost.
    pub per_step: Option<Spanned<u64>>,
    pub max: Option<Spanned<u64>>,
    /// `upto`: the facilitator's address (its `/supported` names it), which the client's
    /// authorisation lets settle.
    pub facilitator_address: Option<Spanned<String>>,
    /// How long a client's authorisation must stay valid (default 300s).
    pub max_timeout: Option<Spanned<String>>,
}

/// `payment.masumi`: the operator's Masumi payment service (the purchaser side).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MasumiEntry {
    /// Its API base, e.g. `http://127.0.0.1:3001/api/v1`.
    pub url: Spanned<String>,
    /// The variable holding its API key (a key with `canPay`).
    pub token_env: Spanned<String>,
    /// `Preprod` or `Mainnet`.
    pub network: Option<Spanned<String>>,
    /// How long after `payByTime` a purchase not yet locked is given up (the node's own grace).
    pub lock_grace: Option<Spanned<String>>,
}

/// A route's `match` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchEntry {
    pub path_prefix: Spanned<String>,
    pub host: Option<Spanned<String>>,
    pub methods: Option<Vec<Spanned<String>>>,
}
