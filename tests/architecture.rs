//! The layering the source tree in `docs/architecture.md` describes, checked: the crates below the
//! proxy do not pull in its runtime, and the `interlingua` crate's top-level modules import each
//! other without a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The packages `package` depends on to build (normal dependencies, transitively), by name.
fn normal_dependencies(package: &str) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO"))
        .current_dir(root())
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}", "-p", package])
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// `pingora*` matches `pingora` and `pingora-core`; a name without `*` matches itself only.
fn matches(dep: &str, pattern: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(family) => dep == family || dep.starts_with(&format!("{family}-")),
        None => dep == pattern,
    }
}

fn assert_free_of(package: &str, forbidden: &[&str]) {
    let deps = normal_dependencies(package);
    assert!(deps.contains(package), "cargo tree listed {deps:?}");
    let found: Vec<&&str> = forbidden
        .iter()
        .filter(|f| deps.iter().any(|d| matches(d, f)))
        .collect();
    assert!(
        found.is_empty(),
        "{package} depends on {found:?}: it must stay free of {forbidden:?} (see the source tree in docs/architecture.md)"
    );
}

#[test]
fn the_mapping_crate_has_no_runtime_sockets_or_database() {
    assert_free_of(
        "interlingua-mapping",
        &["pingora*", "tokio*", "rusqlite", "hyper*"],
    );
}

#[test]
fn masumi_libraries_have_no_runtime_sockets_or_database() {
    assert_free_of(
        "interlingua-masumi",
        &["pingora*", "tokio*", "rusqlite", "hyper*"],
    );
}

#[test]
fn the_store_does_not_know_the_proxy() {
    assert_free_of("interlingua-store", &["pingora*", "hyper*", "interlingua"]);
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir)
        .expect("readable source dir")
        .flatten()
    {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a source file belongs to (`src/engine/ops.rs` → `engine`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib" && name != "main").then(|| name.to_string())
}

/// Every `crate::NAME` a line of code names, `use crate::{a, b::c}` included.
fn named_modules(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                found.push(name);
            }
        } else {
            found.push(
                after
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect(),
            );
        }
        rest = after;
    }
    found
}

/// Which top-level module imports which, and where (one place per edge, for the message).
fn import_graph() -> BTreeMap<String, BTreeMap<String, String>> {
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(&src, f)).collect();
    let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for file in &files {
        let Some(from) = module_of(&src, file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("readable source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for to in named_modules(code) {
                if to != from && modules.contains(&to) {
                    let place = format!(
                        "{}:{}",
                        file.strip_prefix(root()).unwrap_or(file).display(),
                        n + 1
                    );
                    graph
                        .entry(from.clone())
                        .or_default()
                        .entry(to)
                        .or_insert(place);
                }
            }
        }
    }
    graph
}

/// The modules reachable from `start`, and for each the edge it was first reached by.
fn reachable(
    graph: &BTreeMap<String, BTreeMap<String, String>>,
    start: &str,
) -> BTreeMap<String, (String, String)> {
    let mut seen: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut todo = vec![start.to_string()];
    while let Some(m) = todo.pop() {
        for (to, place) in graph.get(&m).into_iter().flatten() {
            if !seen.contains_key(to) {
                seen.insert(to.clone(), (m.clone(), place.clone()));
                todo.push(to.clone());
            }
        }
    }
    seen
}

#[test]
fn top_level_modules_import_each_other_without_a_circle() {
    let graph = import_graph();
    assert!(
        graph.contains_key("engine"),
        "the scan found no modules: {graph:?}"
    );
    let mut circles = Vec::new();
    for module in graph.keys() {
        let seen = reachable(&graph, module);
        if let Some((from, place)) = seen.get(module) {
            // Walk the path back: module → … → from → module.
            let mut path = vec![format!("{from} → {module} ({place})")];
            let mut at = from.clone();
            while at != *module {
                let (prev, place) = &seen[&at];
                path.push(format!("{prev} → {at} ({place})"));
                at = prev.clone();
            }
            path.reverse();
            circles.push(format!("{module}: {}", path.join(", ")));
        }
    }
    assert!(
        circles.is_empty(),
        "top-level modules import each other in a circle:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_scan_sees_grouped_imports() {
    assert_eq!(
        named_modules("use crate::{config::Key, auth};"),
        vec!["config".to_string(), "auth".to_string()]
    );
    assert_eq!(
        named_modules("let x = crate::engine::go();"),
        vec!["engine".to_string()]
    );
}
