//! Configuration: the TOML file (`file`), how it is read section by section (`sections`), and the
//! validated model the proxy runs on (`model`), built by `validate`. Loading reports every
//! problem it finds, each with file, line and column or the setting's path.

mod access;
mod file;
mod limits;
mod metadata;
mod model;
mod pay;
mod payment;
mod sections;
mod sell;
mod storage;
mod url;
mod validate;
mod values;

use std::path::Path;

pub use access::{parse_quota, QuotaError};
pub use mapping::problem::{Location, Problem, Problems};
pub use mapping::units::{parse_duration, parse_size};
pub use model::*;
pub use sell::SUBMIT_MARGIN;
pub use url::{Url, UrlError};

pub(crate) use mapping::problem::Collector;

/// The default configuration, compiled into the binary so that `interlingua serve` runs even
/// without a `config/` directory at hand.
pub const DEFAULT_CONFIG: &str = include_str!("../../config/interlingua.toml");

/// The file `serve` and `check` read when no `-c` is given.
pub const DEFAULT_CONFIG_PATH: &str = "config/interlingua.toml";

/// The name problems in [`DEFAULT_CONFIG`] are reported under.
pub const EMBEDDED_ORIGIN: &str = "<embedded default>";

/// Reads and validates the config file at `path`.
///
/// Returns every problem found: unreadable file, TOML syntax, unknown keys, bad values and
/// references to things that do not exist.
pub fn load(path: &Path) -> Result<Config, Problems> {
    load_naming(path).0
}

/// Like [`load`], and also the dialects named by routes (valid or not).
pub fn load_naming(path: &Path) -> (Result<Config, Problems>, Named) {
    let origin = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => parse_naming(&text, &origin),
        Err(e) => {
            let mut c = Collector::new(&origin, "");
            c.at(None, "", format!("cannot read the file: {e}"));
            (Err(c.into_problems()), Named::default())
        }
    }
}

/// Validates config text. `origin` names the text in problem messages.
pub fn parse(text: &str, origin: &str) -> Result<Config, Problems> {
    parse_naming(text, origin).0
}

/// What an invalid config still says about the dialects its routes name, so that their mapping
/// files can be checked (and their problems reported) in the same run.
#[derive(Debug, Clone, Default)]
pub struct Named {
    pub dialects: Vec<String>,
    pub mappings_dir: std::path::PathBuf,
}

/// Like [`parse`], and also the dialects named by routes (valid or not).
pub fn parse_naming(text: &str, origin: &str) -> (Result<Config, Problems>, Named) {
    let mut c = Collector::new(origin, text);
    let (root, syntax_errors) = toml::de::DeTable::parse_recoverable(text);
    if !syntax_errors.is_empty() {
        // What follows a syntax error is guesswork; report only what the parser is sure of.
        for e in &syntax_errors {
            c.toml("", e);
        }
        return (Err(c.into_problems()), Named::default());
    }
    let raw = sections::read(root.into_inner(), &mut c);
    let named = Named {
        dialects: raw
            .routes
            .iter()
            .flat_map(|(_, r)| [&r.front, &r.back])
            .flatten()
            .map(|d| d.get_ref().clone())
            .filter(|d| d != "passthrough")
            .collect(),
        mappings_dir: raw
            .server
            .mappings_dir
            .as_ref()
            .map_or_else(|| "./mappings".into(), |d| d.get_ref().into()),
    };
    let config = validate::build(raw, origin, &mut c);
    let result = match config {
        Some(config) if c.is_empty() => Ok(config),
        _ => {
            if c.is_empty() {
                c.at(
                    None,
                    "",
                    "the configuration could not be built (please report this)",
                );
            }
            Err(c.into_problems())
        }
    };
    (result, named)
}
