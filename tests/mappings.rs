//! The mapping files read well, and the guide in `docs/mapping-language.md` says what its files
//! do: no line over 120 characters, no expression nesting more than three calls, every TOML block
//! of the guide (the part of the page between its `<!-- the guide:` and `<!-- end of the guide -->`
//! lines) taken from its files (`tests/fixtures/guide/`), every command it shows printing what it
//! shows when run there.

mod common;

use std::path::{Path, PathBuf};

use common::process::interlingua;

const LONGEST_LINE: usize = 120;
const DEEPEST_CALLS: usize = 3;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn guide_dir() -> PathBuf {
    root().join("tests/fixtures/guide")
}

/// Every file under `dir`, in order.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

fn mapping_files() -> Vec<PathBuf> {
    [root().join("mappings"), guide_dir()]
        .iter()
        .flat_map(|d| files(d))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect()
}

#[test]
fn no_line_in_the_mappings_or_the_guide_is_over_120_characters() {
    let mut long = Vec::new();
    let mut read = 0;
    for dir in [root().join("mappings"), guide_dir()] {
        for path in files(&dir) {
            let text = std::fs::read_to_string(&path).unwrap();
            read += 1;
            for (i, line) in text.lines().enumerate() {
                let n = line.chars().count();
                if n > LONGEST_LINE {
                    long.push(format!("{}:{}: {n} characters", path.display(), i + 1));
                }
            }
        }
    }
    assert!(read >= 10, "only {read} files read");
    assert!(long.is_empty(), "\n{}", long.join("\n"));
}

/// How deep calls nest in an expression's text (a list or parentheses alone add nothing).
fn call_depth(expr: &str) -> usize {
    let (mut open, mut deepest, mut quote) = (Vec::new(), 0, None);
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match quote {
            Some(_) if c == '\\' => i += 1,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '(' => {
                let before = chars[..i].iter().rev().find(|c| !c.is_whitespace());
                open.push(before.is_some_and(|b| b.is_alphanumeric() || *b == '_'));
                deepest = deepest.max(open.iter().filter(|call| **call).count());
            }
            None if c == ')' => {
                open.pop();
            }
            None => {}
        }
        i += 1;
    }
    deepest
}

/// The expressions of a mapping: `[let]`'s values, and every string under an expression key.
fn expressions<'a>(key: &str, value: &'a toml::Value, in_let: bool, out: &mut Vec<&'a str>) {
    const KEYS: &[&str] = &["value", "read", "when", "holds", "target", "wait", "status"];
    match value {
        toml::Value::String(s) if in_let || KEYS.contains(&key) => out.push(s),
        toml::Value::Table(t) => t
            .iter()
            .for_each(|(k, v)| expressions(k, v, in_let || k == "let", out)),
        toml::Value::Array(a) => a.iter().for_each(|v| expressions(key, v, in_let, out)),
        _ => {}
    }
}

#[test]
fn no_expression_in_the_mappings_nests_more_than_three_calls() {
    assert_eq!(
        call_depth("if(a, object('x', get(b, 'c')), null) ?? 'f(g(h(i)))'"),
        3
    );
    assert_eq!(call_depth("[(a ?? b), (c)]"), 0);
    let mut deep = Vec::new();
    let mut seen = 0;
    for path in mapping_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let doc: toml::Value = toml::from_str(&text).unwrap();
        let mut found = Vec::new();
        expressions("", &doc, false, &mut found);
        seen += found.len();
        for e in found {
            let depth = call_depth(e);
            if depth > DEEPEST_CALLS {
                deep.push(format!("{}: {depth} calls deep: {e}", path.display()));
            }
        }
    }
    assert!(seen > 500, "only {seen} expressions found");
    assert!(deep.is_empty(), "\n{}", deep.join("\n"));
}

/// The fenced blocks of the guide with the given info string: those between the page's
/// `<!-- the guide:` and `<!-- end of the guide -->` lines (the reference below the guide shows
/// keys in blocks of its own, which are examples, not files).
fn guide_blocks(info: &str) -> Vec<String> {
    let page = std::fs::read_to_string(root().join("docs/mapping-language.md")).unwrap();
    let start = page
        .find("\n<!-- the guide:")
        .expect("docs/mapping-language.md marks where its guide starts");
    let end = page[start..]
        .find("\n<!-- end of the guide -->")
        .map(|i| start + i)
        .expect("docs/mapping-language.md marks where its guide ends");
    let guide = &page[start..end];
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in guide.lines() {
        match &mut current {
            None if line == format!("```{info}") => current = Some(String::new()),
            Some(block) if line == "```" => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

#[test]
fn every_toml_block_of_the_guide_is_taken_from_its_files() {
    let texts: Vec<String> = files(&guide_dir())
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let blocks = guide_blocks("toml");
    assert!(blocks.len() >= 15, "only {} TOML blocks", blocks.len());
    for block in blocks {
        assert!(
            texts.iter().any(|t| t.contains(&block)),
            "not in tests/fixtures/guide/:\n{block}"
        );
    }
}

#[test]
fn every_command_of_the_guide_prints_what_the_guide_shows() {
    let mut ran = 0;
    for block in guide_blocks("console") {
        let mut lines = block.lines().peekable();
        while let Some(command) = lines.next() {
            let args: Vec<&str> = command
                .strip_prefix("$ interlingua ")
                .unwrap_or_else(|| panic!("not a command: {command}"))
                .split_whitespace()
                .collect();
            let mut shown = String::new();
            while let Some(line) = lines.next_if(|l| !l.starts_with("$ ")) {
                shown.push_str(line);
                shown.push('\n');
            }
            let out = interlingua()
                .args(&args)
                .current_dir(guide_dir())
                .output()
                .unwrap();
            let printed = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(printed, shown, "{command}");
            ran += 1;
        }
    }
    assert!(ran >= 10, "only {ran} commands");
}
