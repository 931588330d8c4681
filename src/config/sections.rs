//! Splits a parsed TOML document into its sections and deserializes each one on its own, so that
//! a mistake in one route does not hide a mistake in the next: every problem is reported.

use std::collections::HashSet;

use serde::de::DeserializeOwned;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::file::{
    AdminSection, AuthSection, LimitsSection, ListenerEntry, LogSection, RouteEntry, ServerSection,
    StoreSection, TelemetrySection, UpstreamEntry,
};
use mapping::problem::{one, Collector};

/// The sections of a config file that deserialized; entries that did not are reported and left out.
#[derive(Default)]
pub struct RawConfig {
    pub server: ServerSection,
    pub log: LogSection,
    pub admin: Option<AdminSection>,
    pub auth: Option<AuthSection>,
    pub store: Option<StoreSection>,
    pub limits: Option<LimitsSection>,
    pub telemetry: Option<TelemetrySection>,
    /// `(index in the file, entry)`, so messages can name `listeners[2]`.
    pub listeners: Vec<(usize, ListenerEntry)>,
    pub upstreams: Vec<(usize, UpstreamEntry)>,
    pub routes: Vec<(usize, RouteEntry)>,
    /// Whether `[[listeners]]` appeared at all (an empty proxy is a mistake, not a default).
    pub has_listeners: bool,
    /// Names of upstreams that were present but invalid: routes naming them are not reported a
    /// second time as naming an unknown upstream.
    pub broken_upstreams: HashSet<String>,
}

const SECTIONS: &[&str] = &[
    "server",
    "log",
    "admin",
    "auth",
    "store",
    "limits",
    "telemetry",
    "listeners",
    "upstreams",
    "routes",
];

/// Reads every known section of `root`, reporting unknown ones and every entry that fails.
pub fn read(root: DeTable<'_>, problems: &mut Collector<'_>) -> RawConfig {
    let mut raw = RawConfig::default();
    for (key, value) in root.iter() {
        let name: &str = key.get_ref();
        match name {
            "server" => {
                if let Some(v) = one(value, name, problems) {
                    raw.server = v;
                }
            }
            "log" => {
                if let Some(v) = one(value, name, problems) {
                    raw.log = v;
                }
            }
            "admin" => raw.admin = one(value, name, problems),
            "auth" => raw.auth = one(value, name, problems),
            "store" => raw.store = one(value, name, problems),
            "limits" => raw.limits = one(value, name, problems),
            "telemetry" => raw.telemetry = one(value, name, problems),
            "listeners" => {
                raw.has_listeners = true;
                raw.listeners = many(value, name, problems);
            }
            "upstreams" => {
                raw.upstreams = many(value, name, problems);
                raw.broken_upstreams = names_of_broken_entries(value, &raw.upstreams);
            }
            "routes" => raw.routes = many(value, name, problems),
            other => problems.at(
                Some(key.span()),
                other,
                format!(
                    "unknown section `{other}`; expected one of: {}",
                    SECTIONS.join(", ")
                ),
            ),
        }
    }
    raw
}

pub(crate) fn many<T: DeserializeOwned>(
    value: &Spanned<DeValue<'_>>,
    path: &str,
    problems: &mut Collector<'_>,
) -> Vec<(usize, T)> {
    let DeValue::Array(items) = value.get_ref() else {
        problems.at(
            Some(value.span()),
            path,
            format!("must be an array of tables: write each entry as [[{path}]]"),
        );
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| one(item, &format!("{path}[{i}]"), problems).map(|v| (i, v)))
        .collect()
}

/// The `name` of every entry of an array of tables that did not make it into `parsed`.
fn names_of_broken_entries(
    value: &Spanned<DeValue<'_>>,
    parsed: &[(usize, UpstreamEntry)],
) -> HashSet<String> {
    let DeValue::Array(items) = value.get_ref() else {
        return HashSet::new();
    };
    let ok: HashSet<usize> = parsed.iter().map(|(i, _)| *i).collect();
    items
        .iter()
        .enumerate()
        .filter(|(i, _)| !ok.contains(i))
        .filter_map(|(_, item)| match item.get_ref() {
            DeValue::Table(t) => t
                .get("name")
                .and_then(|n| n.get_ref().as_str())
                .map(str::to_string),
            _ => None,
        })
        .collect()
}
