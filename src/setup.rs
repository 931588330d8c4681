//! Everything a server is started from: the validated config and the dialects its routes name,
//! loaded together so that one report holds every problem of both, and where they came from, so
//! that a reload can read them again.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use mapping::dialect::{self, Dialects};
use mapping::problem::{Kind, Location, Problem};

use crate::config::{self, Config, Named, Problems};

/// A valid configuration and its compiled dialects.
pub struct Setup {
    pub config: Config,
    pub dialects: Dialects,
    /// Where the config text came from.
    pub source: Source,
    /// A digest of the config text and of the mapping files read for it: equal digests, same
    /// setup (a reload that finds nothing changed has nothing to do).
    pub digest: u64,
}

/// Where a config's text comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A file, read again by each reload.
    File(PathBuf),
    /// Text given whole (the embedded default, or a test's): a reload reads the mapping files
    /// again, not the text.
    Text { text: String, origin: String },
}

/// Loads the config file at `path` and the mapping files its routes name.
pub fn load(path: &Path) -> Result<Setup, Problems> {
    Source::File(path.to_path_buf()).load()
}

/// Validates config text (named `origin` in problems) and loads its dialects.
pub fn parse(text: &str, origin: &str) -> Result<Setup, Problems> {
    Source::Text {
        text: text.to_string(),
        origin: origin.to_string(),
    }
    .load()
}

impl Source {
    /// Reads, validates and compiles the setup this source holds now.
    pub fn load(&self) -> Result<Setup, Problems> {
        let (config, text) = match self {
            Source::File(path) => {
                // Read once: the digest is of the very text validated.
                let text = std::fs::read_to_string(path);
                let named = match &text {
                    Ok(t) => config::parse_naming(t, &path.display().to_string()),
                    Err(_) => config::load_naming(path),
                };
                (named, text.unwrap_or_default())
            }
            Source::Text { text, origin } => (config::parse_naming(text, origin), text.clone()),
        };
        let mut setup = with_dialects(config, self)?;
        setup.digest = digest(&text, &setup.config);
        Ok(setup)
    }
}

/// The digest of a config's text, of the key files `[auth]` read (a rotated PEM or key set file
/// is a change), and of the mapping files in its `mappings_dir` that its routes name (the built-in
/// dialects change only with the binary).
fn digest(text: &str, config: &Config) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    for key in config.auth.iter().flat_map(|a| &a.keys) {
        match &key.kind {
            config::KeyKind::Pem { public, .. } => public.hash(&mut h),
            config::KeyKind::Jwks {
                source: config::JwksSource::File(file),
                ..
            } => std::fs::read(file).ok().hash(&mut h),
            _ => {}
        }
    }
    let mut names: Vec<&str> = config
        .routes
        .iter()
        .flat_map(|r| [r.front.name(), r.back.name()])
        .collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        let file = config.server.mappings_dir.join(format!("{name}.toml"));
        name.hash(&mut h);
        std::fs::read(file).ok().hash(&mut h);
    }
    h.finish()
}

fn with_dialects(
    (config, named): (Result<Config, Problems>, Named),
    source: &Source,
) -> Result<Setup, Problems> {
    match config {
        Ok(config) => {
            let dialects = load_dialects(&config)?;
            Ok(Setup {
                config,
                dialects,
                source: source.clone(),
                digest: 0,
            })
        }
        // The config is wrong; its mapping files may be too, and one run should say so.
        Err(mut problems) => {
            let names: Vec<&str> = named.dialects.iter().map(String::as_str).collect();
            if let Err(more) = dialect::load(&named.mappings_dir, &names) {
                problems.0.extend(more.0);
            }
            Err(problems)
        }
    }
}

/// Loads every dialect the routes of `config` name, and checks each route's `vars` against the
/// variables its dialects declare. Every problem is reported.
fn load_dialects(config: &Config) -> Result<Dialects, Problems> {
    let mut names: Vec<&str> = Vec::new();
    for r in &config.routes {
        for d in [&r.front, &r.back] {
            if let config::Dialect::Mapped(n) = d {
                names.push(n);
            }
        }
    }
    let dialects = dialect::load(&config.server.mappings_dir, &names)?;
    let mut problems = Vec::new();
    for (i, r) in config.routes.iter().enumerate() {
        if let config::Dialect::Mapped(front) = &r.front {
            if let Some(m) = dialects.get(front) {
                if !m.ops.iter().any(|o| o.front) {
                    problems.push(Problem {
                        location: Location {
                            file: config.origin.clone(),
                            line_col: None,
                            path: format!("routes[{i}].front"),
                        },
                        message: format!(
                            "`{front}` has no operations a client can call: it can only be a back"
                        ),
                        kind: Kind::Invalid,
                    });
                }
            }
        }
        // A payment service pays for what the back's answers ask: a back that never carries a
        // payment request has nothing to pay.
        if let (Some(_), config::Dialect::Mapped(back)) = (&r.payment, &r.back) {
            if dialects.get(back).is_some_and(|m| !m.carries_payment()) {
                problems.push(Problem {
                    location: Location {
                        file: config.origin.clone(),
                        line_col: None,
                        path: format!("routes[{i}].payment"),
                    },
                    message: format!(
                        "the back `{back}` carries no payment request (its create_task answer reads nothing into task.payment)"
                    ),
                    kind: Kind::Invalid,
                });
            }
        }
        // Selling needs a front that can show a payment request and hash what it shows.
        if let (Some(_), config::Dialect::Mapped(front)) = (&r.sell, &r.front) {
            if dialects.get(front).is_some_and(|m| m.sale().is_none()) {
                problems.push(Problem {
                    location: Location {
                        file: config.origin.clone(),
                        line_col: None,
                        path: format!("routes[{i}].payment.accept.masumi"),
                    },
                    message: format!(
                        "the front `{front}` cannot sell a job: its create_task form declares no `sale` (how a buyer hashes its input and result), so no payment request can be shown to a buyer"
                    ),
                    kind: Kind::Invalid,
                });
            }
        }
        if r.payment.is_some() && r.back == config::Dialect::Passthrough {
            problems.push(Problem {
                location: Location {
                    file: config.origin.clone(),
                    line_col: None,
                    path: format!("routes[{i}].payment"),
                },
                message: "a passthrough route forwards unchanged: it cannot pay".to_string(),
                kind: Kind::Invalid,
            });
        }
        for (dialect, values) in &r.translation.vars {
            let problem = |message: String| Problem {
                location: Location {
                    file: config.origin.clone(),
                    line_col: None,
                    path: format!("routes[{i}].vars.{dialect}"),
                },
                message,
                kind: Kind::Invalid,
            };
            if r.front.name() != dialect && r.back.name() != dialect {
                problems.push(problem(format!(
                    "the route speaks `{}` and `{}`, not `{dialect}`",
                    r.front.name(),
                    r.back.name()
                )));
                continue;
            }
            let Some(mapping) = dialects.get(dialect) else {
                continue;
            };
            for name in values.keys() {
                if !mapping.vars.contains_key(name) {
                    let known: Vec<&str> = mapping.vars.keys().map(String::as_str).collect();
                    problems.push(problem(format!(
                        "`{dialect}` has no variable `{name}`; it declares: {}",
                        known.join(", ")
                    )));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(dialects)
    } else {
        Err(Problems(problems))
    }
}

#[cfg(test)]
mod tests {
    // A route's payment service is checked against its back's mapping: config and dialects
    // together, as `parse` loads them.
    const TOKEN_ENV: &str = "INTERLINGUA_UNIT_MASUMI_TOKEN";

    fn config(back: &str, payment: &str) -> String {
        format!(
            "[[listeners]]\naddress = \"127.0.0.1:0\"\n\n\
             [[upstreams]]\nname = \"agent\"\naddress = \"127.0.0.1:9\"\n\n\
             [[routes]]\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"agent\"\n\
             front = \"{back}\"\nback = \"{back}\"\n{payment}\n"
        )
    }

    fn problems(back: &str, payment: &str) -> String {
        match super::parse(&config(back, payment), "t.toml") {
            Ok(_) => String::new(),
            Err(p) => p.to_string(),
        }
    }

    #[test]
    fn a_payment_service_is_checked_where_it_is_written_and_against_the_back() {
        std::env::set_var(TOKEN_ENV, "k");
        let good = format!(
            "payment = {{ masumi = {{ url = \"http://127.0.0.1:3001/api/v1/\", token_env = \"{TOKEN_ENV}\", network = \"Mainnet\", lock_grace = \"1m\" }} }}"
        );
        let setup = super::parse(&config("mip003", &good), "t.toml").unwrap();
        assert_eq!(
            setup.config.routes[0].payment,
            Some(crate::config::PaymentService::Masumi(
                crate::config::MasumiService {
                    url: "http://127.0.0.1:3001/api/v1".to_string(),
                    token: "k".to_string(),
                    network: crate::config::MasumiNetwork::Mainnet,
                    lock_grace: std::time::Duration::from_secs(60),
                }
            ))
        );
        let bad = r#"payment = { masumi = { url = "ftp://x", token_env = "INTERLINGUA_UNIT_UNSET", network = "preprod" } }"#;
        let found = problems("mip003", bad);
        for expected in [
            "t.toml:13:30: routes[0].payment.masumi.url: `ftp://x` is not an http:// or https:// URL",
            "t.toml:13:53: routes[0].payment.masumi.token_env: the environment variable `INTERLINGUA_UNIT_UNSET` is not set",
            "t.toml:13:89: routes[0].payment.masumi.network: `preprod` is not `Preprod` or `Mainnet`",
        ] {
            assert!(found.contains(expected), "{expected} in:\n{found}");
        }
        assert!(problems("mip003", "payment = { stripe = {} }").contains("unknown field `stripe`"));
        // A back that never asks to be paid has nothing to pay.
        assert!(problems("nevermined", &good)
            .contains("routes[0].payment: the back `nevermined` carries no payment request"));
    }
}
