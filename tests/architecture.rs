//! The layering that the source tree in `docs/architecture.md` describes, checked at two scales.
//!
//! Between crates: the workspace's crates are its layers, and `cargo tree` shows that those below
//! the proxy do not pull in its runtime, its sockets or a database they do not own.
//!
//! Between modules: inside every crate of the workspace, at every level of its module tree, the
//! children of one module refer to each other without a cycle. Modules are the layers within a
//! crate (each crate's `lib.rs` maps its own from the bottom up): two siblings that need each
//! other can be read, tested and moved only together, and are usually one concern split in two, or
//! share an item that belongs in a third module both would import. The code is read as Rust with
//! `syn`, not as lines: a module refers to another when its code names it in a `use`, in a path
//! (a type, an expression, a pattern, a macro's arguments) starting at `crate::`, `self::` or
//! `super::`, resolved to the longest prefix that is a module of the crate. Under a parent, child
//! A depends on child B when anything inside A refers into B; a module naming its parent or its
//! own children is how a tree is built, and is not a dependency between siblings. A re-export
//! hides the module an item lives in, so a cycle is not to be removed by re-exporting.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{Attribute, ImplItem, Item, ItemMod, Meta, UseTree};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// What `cargo ARGS` prints, run in the workspace; a failure fails the test with cargo's words.
fn cargo(args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO"))
        .current_dir(root())
        .args(args)
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo {} failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The packages `package` depends on to build (normal dependencies, transitively), by name.
fn normal_dependencies(package: &str) -> BTreeSet<String> {
    let out = cargo(&[
        "tree",
        "--offline",
        "--locked",
        "-e",
        "normal",
        "--prefix",
        "none",
        "--format",
        "{p}",
        "-p",
        package,
    ]);
    String::from_utf8_lossy(&out)
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

/// A module's path from its crate's root: `["dialect", "expr"]`; the root is `[]`.
type ModPath = Vec<String>;

/// A module's path as Rust writes it: `crate::dialect::expr`.
fn module_name(module: &[String]) -> String {
    std::iter::once("crate")
        .chain(module.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("::")
}

/// A file as the messages name it: relative to the workspace, as an editor opens it.
fn relative(file: &Path) -> String {
    file.strip_prefix(root())
        .unwrap_or(file)
        .display()
        .to_string()
}

/// Every library and binary of the workspace whose root file is in its package's `src/`, by
/// package and kind (`interlingua-store lib`): the crates whose module trees are checked. Cargo's
/// own list, so that a crate added to the workspace is checked without being named here.
fn crate_roots() -> Vec<(String, PathBuf)> {
    let out = cargo(&[
        "metadata",
        "--offline",
        "--no-deps",
        "--format-version",
        "1",
    ]);
    let metadata: serde_json::Value =
        serde_json::from_slice(&out).expect("cargo metadata prints JSON");
    let mut roots = Vec::new();
    for package in metadata["packages"].as_array().expect("a list of packages") {
        let manifest = Path::new(package["manifest_path"].as_str().expect("a manifest path"));
        let src = manifest
            .parent()
            .expect("a manifest in a directory")
            .join("src");
        for target in package["targets"].as_array().expect("a list of targets") {
            let file = PathBuf::from(target["src_path"].as_str().expect("a root file"));
            let kinds = target["kind"].as_array().expect("a list of kinds");
            let kind = kinds
                .iter()
                .filter_map(|k| k.as_str())
                .find(|k| ["lib", "bin"].contains(k));
            if let (Some(kind), true) = (kind, file.starts_with(&src)) {
                let package = package["name"].as_str().expect("a package name");
                roots.push((format!("{package} {kind}"), file));
            }
        }
    }
    roots
}

/// Whether an item is built only for tests (`#[cfg(test)]`, `#[test]`): tests may import anything,
/// so such code is no dependency.
fn test_only(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("test")
            || (attr.path().is_ident("cfg")
                && attr.parse_args::<Meta>().is_ok_and(|p| requires_test(&p)))
    })
}

/// Whether a `cfg` predicate holds only when testing: `test`, `all(test, …)`, `any(test, test)`.
fn requires_test(predicate: &Meta) -> bool {
    let Meta::List(list) = predicate else {
        return predicate.path().is_ident("test");
    };
    let operands: Vec<Meta> = list
        .parse_args_with(Punctuated::<Meta, syn::Token![,]>::parse_terminated)
        .map(|operands| operands.into_iter().collect())
        .unwrap_or_default();
    if list.path.is_ident("all") {
        operands.iter().any(requires_test)
    } else if list.path.is_ident("any") {
        !operands.is_empty() && operands.iter().all(requires_test)
    } else {
        false
    }
}

/// An item's outer attributes (syn gives each kind of item its own field).
fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// An associated item's outer attributes.
fn impl_item_attrs(item: &ImplItem) -> &[Attribute] {
    match item {
        ImplItem::Const(i) => &i.attrs,
        ImplItem::Fn(i) => &i.attrs,
        ImplItem::Type(i) => &i.attrs,
        ImplItem::Macro(i) => &i.attrs,
        _ => &[],
    }
}

/// A path as written in a module (`super::b::T`) made absolute (`["b", "T"]` from `["a"]`), or
/// `None` when it does not start at `crate`, `self` or `super`: such a path names another crate, or
/// something in scope through a `use` that is counted itself.
fn absolute(module: &[String], segments: &[String]) -> Option<Vec<String>> {
    let (first, mut rest) = segments.split_first()?;
    let mut at = match first.as_str() {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        "super" => module[..module.len().checked_sub(1)?].to_vec(),
        _ => return None,
    };
    while let Some((_, tail)) = rest.split_first().filter(|(s, _)| s.as_str() == "super") {
        at.pop()?;
        rest = tail;
    }
    at.extend(rest.iter().cloned());
    Some(at)
}

/// The paths a `use` tree names, each at its last segment: `use crate::{a, b::C}` names `crate::a`
/// and `crate::b::C`; `self` in a group names the path before it.
fn use_paths(tree: &UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, Span)>) {
    let named = |ident: &syn::Ident| {
        let mut path = prefix.clone();
        if ident != "self" {
            path.push(ident.to_string());
        }
        (path, ident.span())
    };
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_paths(&p.tree, prefix, out);
            prefix.pop();
        }
        UseTree::Name(n) => out.push(named(&n.ident)),
        UseTree::Rename(r) => out.push(named(&r.ident)),
        UseTree::Glob(g) => out.push((prefix.clone(), g.star_token.spans[0])),
        UseTree::Group(g) => g.items.iter().for_each(|t| use_paths(t, prefix, out)),
    }
}

/// The paths in a macro's arguments (`format!("{}", crate::a::B)`, `$crate::a` in a
/// `macro_rules!`), found by their shape, `ident :: ident …`: syn leaves those arguments as tokens.
fn token_paths(tokens: TokenStream, out: &mut Vec<(Vec<String>, Span)>) {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < trees.len() {
        match &trees[i] {
            TokenTree::Group(group) => token_paths(group.stream(), out),
            TokenTree::Ident(start) => {
                let mut segments = vec![start.to_string()];
                while let (
                    Some(TokenTree::Punct(a)),
                    Some(TokenTree::Punct(b)),
                    Some(TokenTree::Ident(next)),
                ) = (trees.get(i + 1), trees.get(i + 2), trees.get(i + 3))
                {
                    if a.as_char() != ':' || b.as_char() != ':' {
                        break;
                    }
                    segments.push(next.to_string());
                    i += 3;
                }
                if segments.len() > 1 {
                    out.push((segments, start.span()));
                }
            }
            _ => {}
        }
        i += 1;
    }
}

/// A module's code naming a path of its crate, at a place (`crates/store/src/open.rs:12`).
struct Reference {
    from: ModPath,
    /// Absolute, and not yet resolved: the modules are known once the whole tree is read.
    target: Vec<String>,
    place: String,
}

/// Collects the references in one module's own code: its nested modules are read as modules of
/// their own, and test-only items are skipped.
struct References<'a> {
    module: &'a [String],
    file: String,
    found: Vec<Reference>,
}

impl References<'_> {
    fn note(&mut self, segments: &[String], span: Span) {
        if let Some(target) = absolute(self.module, segments) {
            self.found.push(Reference {
                from: self.module.to_vec(),
                target,
                place: format!("{}:{}", self.file, span.start().line),
            });
        }
    }
}

impl<'ast> Visit<'ast> for References<'_> {
    fn visit_item(&mut self, item: &'ast Item) {
        if !matches!(item, Item::Mod(_)) && !test_only(item_attrs(item)) {
            visit::visit_item(self, item);
        }
    }

    fn visit_impl_item(&mut self, item: &'ast ImplItem) {
        if !test_only(impl_item_attrs(item)) {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_use_tree(&mut self, tree: &'ast UseTree) {
        let mut paths = Vec::new();
        use_paths(tree, &mut Vec::new(), &mut paths);
        for (segments, span) in paths {
            self.note(&segments, span);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if let (None, Some(first)) = (&path.leading_colon, path.segments.first()) {
            let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.note(&segments, first.ident.span());
        }
        // Generic arguments may name modules too.
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        let mut paths = Vec::new();
        token_paths(mac.tokens.clone(), &mut paths);
        for (segments, span) in paths {
            self.note(&segments, span);
        }
        visit::visit_macro(self, mac);
    }
}

/// One crate's module tree, read from its root file down through its `mod` items, and what each
/// module's code refers to.
struct Crate {
    modules: BTreeSet<ModPath>,
    /// In the order the files are read, so that an edge's place is the same on every run.
    references: Vec<Reference>,
}

fn parse(file: &Path, text: &str) -> syn::File {
    syn::parse_file(text).unwrap_or_else(|e| panic!("{}: {e}", relative(file)))
}

impl Crate {
    fn read(root_file: &Path) -> Crate {
        let text = std::fs::read_to_string(root_file)
            .unwrap_or_else(|e| panic!("{}: {e}", relative(root_file)));
        Crate::from_source(root_file, &text)
    }

    fn from_source(root_file: &Path, text: &str) -> Crate {
        let mut krate = Crate {
            modules: BTreeSet::new(),
            references: Vec::new(),
        };
        let items = parse(root_file, text).items;
        let dir = root_file.parent().expect("a root file lies in a directory");
        krate.add(Vec::new(), root_file, &items, dir);
        krate
    }

    /// Adds the module at `path`, whose `items` are written in `file` and whose children's files
    /// are in `dir`, and its descendants.
    fn add(&mut self, path: ModPath, file: &Path, items: &[Item], dir: &Path) {
        let mut references = References {
            module: &path,
            file: relative(file),
            found: Vec::new(),
        };
        items.iter().for_each(|item| references.visit_item(item));
        self.references.extend(references.found);
        self.modules.insert(path.clone());
        for module in items.iter().filter_map(built_module) {
            let name = module.ident.to_string();
            let mut child = path.clone();
            child.push(name.clone());
            if let Some((_, items)) = &module.content {
                self.add(child, file, items, &dir.join(&name));
                continue;
            }
            assert!(
                !module.attrs.iter().any(|a| a.path().is_ident("path")),
                "{}: mod {name} has a #[path], which this check does not follow",
                relative(file)
            );
            let (child_file, child_dir) = module_file(dir, &name);
            let text = std::fs::read_to_string(&child_file)
                .unwrap_or_else(|e| panic!("{}: {e}", relative(&child_file)));
            self.add(
                child,
                &child_file,
                &parse(&child_file, &text).items,
                &child_dir,
            );
        }
    }

    /// The module a reference's target is in: the longest prefix of it that is a module.
    fn resolve(&self, target: &[String]) -> &ModPath {
        (0..=target.len())
            .rev()
            .find_map(|n| self.modules.get(&target[..n]))
            .expect("the crate's root is a module")
    }
}

/// A `mod` item that is built outside tests.
fn built_module(item: &Item) -> Option<&ItemMod> {
    match item {
        Item::Mod(module) if !test_only(&module.attrs) => Some(module),
        _ => None,
    }
}

/// Where `mod name;` is written, declared by a module whose children are in `dir`, and where that
/// module's children are: `dir/name.rs` with children in `dir/name/`, or `dir/name/mod.rs`.
fn module_file(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let flat = dir.join(format!("{name}.rs"));
    let nested = dir.join(name);
    if flat.exists() {
        (flat, nested)
    } else {
        (nested.join("mod.rs"), nested)
    }
}

/// Under each parent module, which child refers into which, at the first place found.
type Siblings = BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, String>>>;

/// The dependencies between siblings. A reference from inside A into B is one edge, between the
/// children of their deepest common ancestor that hold A and B; none when one of A and B holds the
/// other (a child naming its parent's items, a parent naming its children's).
fn sibling_edges(krate: &Crate) -> Siblings {
    let mut siblings = Siblings::new();
    for reference in &krate.references {
        let (from, to) = (&reference.from, krate.resolve(&reference.target));
        let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
        if common == from.len() || common == to.len() {
            continue;
        }
        siblings
            .entry(from[..common].to_vec())
            .or_default()
            .entry(from[common].clone())
            .or_default()
            .entry(to[common].clone())
            .or_insert_with(|| reference.place.clone());
    }
    siblings
}

/// The shortest path from `start` to `goal` in `graph`, both included.
fn shortest_path(
    graph: &BTreeMap<String, BTreeMap<String, String>>,
    start: &str,
    goal: &str,
) -> Option<Vec<String>> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut todo = VecDeque::from([start]);
    while let Some(at) = todo.pop_front() {
        if at == goal {
            let mut path = vec![goal.to_string()];
            let mut at = goal;
            while at != start {
                at = came_from[at];
                path.push(at.to_string());
            }
            path.reverse();
            return Some(path);
        }
        for next in graph.get(at).into_iter().flat_map(BTreeMap::keys) {
            if next != start && !came_from.contains_key(next.as_str()) {
                came_from.insert(next, at);
                todo.push_back(next);
            }
        }
    }
    None
}

/// The cycles of one parent's children: for every edge on a cycle, the shortest cycle through it,
/// each cycle once (starting at its least module), so that every edge to remove is shown.
fn cycles(graph: &BTreeMap<String, BTreeMap<String, String>>) -> BTreeSet<Vec<String>> {
    let mut found = BTreeSet::new();
    for (from, tos) in graph {
        for to in tos.keys() {
            if let Some(back) = shortest_path(graph, to, from) {
                // from → to → … → from, without repeating from.
                let mut cycle = vec![from.clone()];
                cycle.extend_from_slice(&back[..back.len() - 1]);
                let least = (0..cycle.len()).min_by_key(|&i| &cycle[i]).unwrap_or(0);
                cycle.rotate_left(least);
                found.insert(cycle);
            }
        }
    }
    found
}

/// Each cycle between siblings in a crate, as a heading and one line per edge with its place.
fn cycle_reports(name: &str, krate: &Crate) -> Vec<String> {
    let mut reports = Vec::new();
    for (parent, graph) in sibling_edges(krate) {
        for cycle in cycles(&graph) {
            let ring: Vec<&String> = cycle.iter().chain(cycle.first()).collect();
            let mut report = format!(
                "{name}, in {}: {}",
                module_name(&parent),
                ring.iter()
                    .map(|m| m.as_str())
                    .collect::<Vec<_>>()
                    .join(" → ")
            );
            for edge in ring.windows(2) {
                let place = &graph[edge[0]][edge[1]];
                report.push_str(&format!("\n    {} → {}  {place}", edge[0], edge[1]));
            }
            reports.push(report);
        }
    }
    reports
}

/// Code built only for tests (`#[cfg(test)]` items, `#[test]` functions) is not counted: a test may
/// import whatever it checks.
#[test]
fn sibling_modules_refer_to_each_other_without_a_cycle() {
    let crates: Vec<(String, Crate)> = crate_roots()
        .into_iter()
        .map(|(name, file)| (name, Crate::read(&file)))
        .collect();
    // That the check read what it should: the crates, and their trees below their roots.
    let read = |name: &str| crates.iter().find(|(n, _)| n == name).map(|(_, k)| k);
    for name in ["interlingua-mapping lib", "interlingua-store lib"] {
        assert!(read(name).is_some(), "cargo metadata listed no {name}");
    }
    let proxy = read("interlingua lib").expect("cargo metadata lists interlingua's library");
    assert!(
        proxy
            .modules
            .contains(&vec!["engine".to_string(), "watch".to_string()]),
        "the check did not read src/lib.rs's tree: {:?}",
        proxy.modules
    );
    let reports: Vec<String> = crates
        .iter()
        .flat_map(|(name, krate)| cycle_reports(name, krate))
        .collect();
    assert!(
        reports.is_empty(),
        "sibling modules refer to each other in a cycle (each edge with the first place found that \
         makes it; see tests/architecture.rs):\n{}",
        reports.join("\n")
    );
}

/// A crate in one file, its modules inline: what the check counts, and what it leaves out.
const SAMPLE: &str = r#"
mod a {
    use crate::b::{self, c::Deep};
    pub fn f() -> super::b::T { format!("{}", crate::c::NAME) }
    #[cfg(test)]
    mod tests { use crate::c::X; }
    mod inner { use super::super::c::Y; use super::f; }
}
mod b { pub mod c { pub fn g() { super::super::a::f(); } } use self::c::g; }
mod c { #[cfg(test)] fn t() { crate::b::c::g() } }
"#;

#[test]
fn the_module_check_reads_uses_paths_and_macros_and_skips_tests() {
    let krate = Crate::from_source(Path::new("sample.rs"), SAMPLE);
    let siblings = sibling_edges(&krate);
    let edges = |parent: &[&str]| -> Vec<(String, String, String)> {
        let parent: ModPath = parent.iter().map(|s| s.to_string()).collect();
        siblings
            .get(&parent)
            .into_iter()
            .flatten()
            .flat_map(|(from, tos)| {
                tos.iter()
                    .map(|(to, at)| (from.clone(), to.clone(), at.clone()))
            })
            .collect()
    };
    let edge = |from: &str, to: &str, at: &str| (from.to_string(), to.to_string(), at.to_string());
    // a → c at the macro's argument (line 4), not at the test's import; the child inner's import
    // of c (line 7) is a's too; b → a from b's child c; b's import of its own child is no edge.
    assert_eq!(
        edges(&[]),
        vec![
            edge("a", "b", "sample.rs:3"),
            edge("a", "c", "sample.rs:4"),
            edge("b", "a", "sample.rs:9"),
        ]
    );
    assert!(edges(&["a"]).is_empty() && edges(&["b"]).is_empty());
    let reports = cycle_reports("sample", &krate);
    assert_eq!(
        reports,
        vec!["sample, in crate: a → b → a\n    a → b  sample.rs:3\n    b → a  sample.rs:9"]
    );
}
