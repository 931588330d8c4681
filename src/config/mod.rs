//! Configuration: the TOML file (`file`), how it is read section by section (`sections`), and the
//! validated model the proxy runs on (`model`), built by `validate`. Loading reports every
//! problem it finds, each with file, line and column or the setting's path.

mod file;
mod model;
mod problem;
mod sections;
mod units;
mod validate;

use std::path::Path;

pub use model::*;
pub use problem::{Location, Problem, Problems};
pub use units::{parse_duration, parse_size};

use problem::Collector;

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
    let origin = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&text, &origin),
        Err(e) => {
            let mut c = Collector::new(&origin, "");
            c.at(None, "", format!("cannot read the file: {e}"));
            Err(c.into_problems())
        }
    }
}

/// Validates config text. `origin` names the text in problem messages.
pub fn parse(text: &str, origin: &str) -> Result<Config, Problems> {
    let mut c = Collector::new(origin, text);
    let (root, syntax_errors) = toml::de::DeTable::parse_recoverable(text);
    if !syntax_errors.is_empty() {
        // What follows a syntax error is guesswork; report only what the parser is sure of.
        for e in &syntax_errors {
            c.toml("", e);
        }
        return Err(c.into_problems());
    }
    let raw = sections::read(root.into_inner(), &mut c);
    let config = validate::build(raw, origin, &mut c);
    match config {
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
    }
}
