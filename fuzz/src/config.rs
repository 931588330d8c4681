//! Target `config`: the text an operator writes, read as a config file and as a mapping file.
//!
//! Both loaders validate TOML into a model and report problems with file, line and column,
//! which the CLI prints: rendering them is part of the target (a span that falls inside a
//! multi-byte character would panic there). A config that names files or environment variables
//! (`pem_file`, `secret_env`) makes the loader read them; that is all it touches.

/// Loads `data` as a config and as a mapping file.
pub fn run(data: &[u8]) {
    // The loaders take text: the file is read as UTF-8 before they see it.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(problems) = interlingua::config::parse(text, "fuzz.toml") {
        let _ = problems.to_string();
    }
    if let Err(problems) = mapping::dialect::compile::parse(text, "fuzz.toml") {
        let _ = problems.to_string();
    }
}
