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
    pub grace_period: Option<Spanned<String>>,
    pub mappings_dir: Option<Spanned<String>>,
}

/// `[log]`: log output.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSection {
    pub format: Option<LogFormatName>,
    pub filter: Option<Spanned<String>>,
    pub access_log: Option<bool>,
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
    /// Per dialect, values for its mapping's `[vars]`: `vars.mip003 = { text_field = "query" }`.
    pub vars: Option<Spanned<toml::Table>>,
    /// The agent's input schema (MIP-003 Attachment 01), as a table.
    pub input_schema: Option<Spanned<toml::Table>>,
    pub validation: Option<Spanned<String>>,
    pub sync_timeout: Option<Spanned<String>>,
    pub poll_interval: Option<Spanned<String>>,
    pub poll_max_interval: Option<Spanned<String>>,
}

/// A route's `match` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchEntry {
    pub path_prefix: Spanned<String>,
    pub host: Option<Spanned<String>>,
    pub methods: Option<Vec<Spanned<String>>>,
}
