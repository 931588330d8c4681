//! Everything a server is started from: the validated config and the dialects its routes name,
//! loaded together so that one report holds every problem of both.

use std::path::Path;

use crate::config::{self, Config, Named, Problems};
use crate::dialect::{self, Dialects};

/// A valid configuration and its compiled dialects.
pub struct Setup {
    pub config: Config,
    pub dialects: Dialects,
}

/// Loads the config file at `path` and the mapping files its routes name.
pub fn load(path: &Path) -> Result<Setup, Problems> {
    with_dialects(config::load_naming(path))
}

/// Validates config text (named `origin` in problems) and loads its dialects.
pub fn parse(text: &str, origin: &str) -> Result<Setup, Problems> {
    with_dialects(config::parse_naming(text, origin))
}

fn with_dialects((config, named): (Result<Config, Problems>, Named)) -> Result<Setup, Problems> {
    match config {
        Ok(config) => {
            let dialects = dialect::load_for(&config)?;
            Ok(Setup { config, dialects })
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
