//! Dialects: mapping files (`mappings/<dialect>.toml`) compiled into translators.
//!
//! The engine knows the canonical model and this mapping language, never a dialect by name. A
//! dialect is found as `<mappings dir>/<name>.toml`, or else among the mapping files compiled into
//! the binary (the files of this repository's `mappings/`), so the binary runs on its own.

pub mod builtins;
pub mod canonical;
pub mod codec;
pub mod compile;
pub mod doc;
pub mod expr;
pub mod file;
pub mod front;
pub mod location;
pub mod mapping;
pub mod named;
pub mod seal;
pub mod syntax;
pub mod template;
pub mod translate;
pub mod value;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

pub use codec::{decode, decode_onto, encode, evaluate, holds, CodecError, Context, Doc, Message};
pub use doc::{Canonical, Decoded};
pub use mapping::Mapping;

use crate::problem::{Kind, Location, Problem, Problems};

/// The dialect that forwards requests and responses unchanged; it has no mapping file.
pub const PASSTHROUGH: &str = "passthrough";

/// Mapping files compiled into the binary: `(dialect, text)`.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("mip003", include_str!("../../../../mappings/mip003.toml")),
    (
        "nevermined",
        include_str!("../../../../mappings/nevermined.toml"),
    ),
    ("a2a", include_str!("../../../../mappings/a2a.toml")),
    ("lmos", include_str!("../../../../mappings/lmos.toml")),
    (
        "multiagent_eval",
        include_str!("../../../../mappings/multiagent_eval.toml"),
    ),
    ("nearai", include_str!("../../../../mappings/nearai.toml")),
    (
        "openai_chat",
        include_str!("../../../../mappings/openai_chat.toml"),
    ),
    ("mcp", include_str!("../../../../mappings/mcp.toml")),
];

/// Where a mapping comes from.
fn source(dir: &Path, name: &str) -> Option<(String, String)> {
    let file = dir.join(format!("{name}.toml"));
    if let Ok(text) = std::fs::read_to_string(&file) {
        return Some((file.display().to_string(), text));
    }
    BUILT_IN
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| (format!("<built-in mappings/{name}.toml>"), text.to_string()))
}

/// The names of every dialect available from `dir` and the built-ins.
pub fn available(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = BUILT_IN.iter().map(|(n, _)| n.to_string()).collect();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "toml") {
                if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                    names.push(stem.to_string());
                }
            }
        }
    }
    names.push(PASSTHROUGH.to_string());
    names.sort();
    names.dedup();
    names
}

/// Loads and compiles the named dialects. Every problem in every file is reported.
pub fn load(dir: &Path, names: &[&str]) -> Result<BTreeMap<String, Arc<Mapping>>, Problems> {
    let mut out = BTreeMap::new();
    let mut problems = Vec::new();
    for &name in names {
        if name == PASSTHROUGH || out.contains_key(name) {
            continue;
        }
        let Some((origin, text)) = source(dir, name) else {
            problems.push(Problem {
                location: Location {
                    file: dir.join(format!("{name}.toml")).display().to_string(),
                    line_col: None,
                    path: String::new(),
                },
                message: format!(
                    "no mapping file for dialect `{name}`; available: {}",
                    available(dir).join(", ")
                ),
                kind: Kind::Invalid,
            });
            continue;
        };
        match compile::parse(&text, &origin) {
            Ok(m) if m.name != name => problems.push(Problem {
                location: Location {
                    file: origin,
                    line_col: None,
                    path: "dialect".to_string(),
                },
                message: format!(
                    "the file says `dialect = \"{}\"`, but it is loaded as `{name}`",
                    m.name
                ),
                kind: Kind::Invalid,
            }),
            Ok(m) => {
                out.insert(name.to_string(), Arc::new(m));
            }
            Err(p) => problems.extend(p.0),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(Problems(problems))
    }
}

/// The compiled mappings of a configuration, by dialect name.
pub type Dialects = BTreeMap<String, Arc<Mapping>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_mappings_compile() {
        for (name, text) in BUILT_IN {
            if let Err(p) = compile::parse(text, name) {
                panic!("{name}:\n{p}");
            }
        }
    }
}
