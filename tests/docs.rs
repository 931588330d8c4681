//! The repository stands on its own. No tracked file cites a file from outside it: the design
//! texts the first versions were written against (`DESIGN`, `DIALECTS`, `PAYMENTS` and `MCP`,
//! each a `.md` file) and the `shared` directory beside the checkout are not part of it, so a
//! comment or a page cites the public specification (its URL and section) or a page of `docs/`
//! instead. And every relative link of the docs (the README, `docs/`, `bench/README.md`,
//! `mappings/`) leads to a file of the repository, and to a heading of it when it names one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// What a file outside the repository is cited by, put together from pieces so that this file
/// does not cite them itself.
fn outside_names() -> [&'static str; 5] {
    [
        concat!("DESIGN", ".md"),
        concat!("DIALECTS", ".md"),
        concat!("PAYMENTS", ".md"),
        concat!("MCP", ".md"),
        concat!("..", "/shared"),
    ]
}

/// The repository's files, relative to its root: those git tracks or, where git cannot say (no
/// git, not a checkout, nothing tracked), every file below the root but those in `target/` and
/// `.git/`.
fn repository_files() -> Vec<PathBuf> {
    let tracked: Vec<PathBuf> = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| {
            out.stdout
                .split(|b| *b == 0)
                .filter(|name| !name.is_empty())
                .map(|name| PathBuf::from(String::from_utf8_lossy(name).into_owned()))
                .collect()
        })
        .unwrap_or_default();
    if !tracked.is_empty() {
        return tracked;
    }
    let mut files = Vec::new();
    walk(root(), Path::new(""), &mut files);
    files.sort();
    files
}

/// Every file below `dir` (which is `rel` from the root), skipping `target/` and `.git/`.
fn walk(dir: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name == "target" || name == ".git" {
            continue;
        }
        let path = entry.path();
        let rel = rel.join(name);
        if path.is_dir() {
            walk(&path, &rel, out);
        } else {
            out.push(rel);
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn no_tracked_file_cites_a_file_outside_the_repository() {
    let files = repository_files();
    assert!(
        files.contains(&PathBuf::from("README.md")),
        "the repository's files were not found ({} listed)",
        files.len()
    );
    let mut found = Vec::new();
    for rel in &files {
        let Ok(bytes) = std::fs::read(root().join(rel)) else {
            continue;
        };
        for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
            for name in outside_names() {
                if contains(line, name.as_bytes()) {
                    found.push(format!("{}:{}: cites {name}", rel.display(), i + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "these lines cite a file outside the repository; cite the public specification (its URL \
         and section) or a page of docs/ instead:\n{}",
        found.join("\n")
    );
}

/// The pages whose links are checked: the README, every page of `docs/`, `bench/README.md` and
/// the Markdown files of `mappings/`.
fn documentation(files: &[PathBuf]) -> Vec<PathBuf> {
    files
        .iter()
        .filter(|f| {
            let f = f.as_path();
            f.extension().is_some_and(|e| e == "md")
                && (f == Path::new("README.md")
                    || f == Path::new("bench/README.md")
                    || f.starts_with("docs")
                    || f.starts_with("mappings"))
        })
        .cloned()
        .collect()
}

/// Where a run of exactly `n` backticks starts in `s`.
fn backtick_run(s: &str, n: usize) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'`' {
            let len = bytes[i..].iter().take_while(|b| **b == b'`').count();
            if len == n {
                return Some(i);
            }
            i += len;
        } else {
            i += 1;
        }
    }
    None
}

/// `line` without its code spans (a run of backticks up to the next run of as many).
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let run = rest[start..].bytes().take_while(|b| *b == b'`').count();
        let inner = &rest[start + run..];
        match backtick_run(inner, run) {
            Some(end) => rest = &inner[end + run..],
            None => {
                out.push_str(&rest[start..start + run]);
                rest = inner;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The lines of a Markdown text that are not in fenced code blocks, with their numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut lines = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match fence {
            Some(f) if trimmed.starts_with(f) => fence = None,
            Some(_) => {}
            None if trimmed.starts_with("```") => fence = Some("```"),
            None if trimmed.starts_with("~~~") => fence = Some("~~~"),
            None => lines.push((i + 1, line)),
        }
    }
    lines
}

/// Whether a link target names a scheme (`https:`, `mailto:`, …): not a file of the repository.
fn is_external(target: &str) -> bool {
    target.split_once(':').is_some_and(|(scheme, _)| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '.' || c == '-')
    })
}

/// The relative link targets of a Markdown text, `[text](target)` and `![alt](target)`, with
/// their line numbers (a title after the target is left out; code is not searched).
fn relative_links(text: &str) -> Vec<(usize, String)> {
    let mut links = Vec::new();
    for (number, line) in prose_lines(text) {
        let prose = without_code_spans(line);
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or("");
            if !target.is_empty() && !is_external(target) {
                links.push((number, target.to_string()));
            }
            rest = &after[end..];
        }
    }
    links
}

/// `target` read from the directory of `page`, as a path from the repository's root; `None` when
/// it climbs out of the repository.
fn resolve(page: &Path, target: &str) -> Option<PathBuf> {
    let joined = page.parent().unwrap_or(Path::new("")).join(target);
    let mut parts = Vec::new();
    for component in joined.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.into_iter().collect())
}

/// The heading of an ATX line (`## Text`), without its closing `#`s.
fn atx_heading(line: &str) -> Option<&str> {
    let hashes = line.bytes().take_while(|b| *b == b'#').count();
    if hashes == 0 || hashes > 6 {
        return None;
    }
    let rest = &line[hashes..];
    if !rest.is_empty() && !rest.starts_with(' ') {
        return None;
    }
    let text = rest.trim();
    let open = text.trim_end_matches('#');
    if open.len() < text.len() && (open.is_empty() || open.ends_with(' ')) {
        Some(open.trim_end())
    } else {
        Some(text)
    }
}

/// The anchor GitHub gives a heading: its text (a link's label, not its target; code without its
/// backticks) lower-cased, every character but letters, digits, `-` and `_` dropped, each space
/// made a `-`.
fn slug(heading: &str) -> String {
    let mut text = heading.to_string();
    while let Some(at) = text.find("](") {
        let Some(close) = text[at..].find(')') else {
            break;
        };
        text.replace_range(at + 1..at + close + 1, "");
    }
    text.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings, as GitHub makes them: the second heading with an anchor
/// already taken gets `-1`, the third `-2`, and so on.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut taken: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let Some(heading) = atx_heading(line) else {
            continue;
        };
        let base = slug(heading);
        let seen = taken.entry(base.clone()).or_insert(0);
        out.insert(if *seen == 0 {
            base
        } else {
            format!("{base}-{seen}")
        });
        *seen += 1;
    }
    out
}

#[test]
fn the_link_checker_reads_markdown_as_github_does() {
    assert_eq!(slug("`[[routes]]`"), "routes");
    assert_eq!(slug("Traces (OpenTelemetry)"), "traces-opentelemetry");
    assert_eq!(slug("A request's path"), "a-requests-path");
    assert_eq!(slug("MIP-003 (Masumi)"), "mip-003-masumi");
    assert_eq!(slug("See [the guide](guide.md)"), "see-the-guide");
    assert_eq!(atx_heading("### Step 1 ###"), Some("Step 1"));
    assert_eq!(atx_heading("#hashtag"), None);
    let page = "# A\n\n## Step\n\n```toml\n# not a heading\n```\n\n## Step\n";
    let found: Vec<String> = anchors(page).into_iter().collect();
    assert_eq!(found, ["a", "step", "step-1"]);
    let links = relative_links(
        "[a](x.md) `[b](code.md)` ``[c](`code`.md)`` ![d](p.png \"title\")\n\
         ```\n[e](fenced.md)\n```\n[f](https://example.com) [g](#here) [h](mailto:a@b.c)\n",
    );
    let targets: Vec<&str> = links.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(targets, ["x.md", "p.png", "#here"]);
    assert_eq!(links[2].0, 5);
    assert_eq!(
        resolve(Path::new("docs/a.md"), "../bench/README.md"),
        Some(PathBuf::from("bench/README.md"))
    );
    assert_eq!(resolve(Path::new("README.md"), "../elsewhere.md"), None);
}

#[test]
fn every_relative_link_in_the_docs_points_to_a_file() {
    let files = repository_files();
    let pages = documentation(&files);
    assert!(
        pages.iter().any(|p| p.starts_with("docs")),
        "no page of docs/ among {pages:?}"
    );
    let mut known: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut broken = Vec::new();
    for page in &pages {
        let Ok(text) = std::fs::read_to_string(root().join(page)) else {
            continue;
        };
        for (line, target) in relative_links(&text) {
            let at = format!("{}:{line}: ({target})", page.display());
            let (path, anchor) = target.split_once('#').unwrap_or((target.as_str(), ""));
            let dest = if path.is_empty() {
                Some(page.clone())
            } else {
                resolve(page, path)
            };
            let Some(dest) = dest else {
                broken.push(format!("{at} leads outside the repository"));
                continue;
            };
            let full = root().join(&dest);
            if !full.exists() {
                broken.push(format!(
                    "{at} leads to {}, which does not exist",
                    dest.display()
                ));
                continue;
            }
            if anchor.is_empty() || dest.extension().is_none_or(|e| e != "md") || !full.is_file() {
                continue;
            }
            let anchors_there = known.entry(dest.clone()).or_insert_with(|| {
                anchors(&std::fs::read_to_string(full.as_path()).unwrap_or_default())
            });
            if !anchors_there.contains(anchor) {
                broken.push(format!(
                    "{at}: {} has no heading whose anchor is #{anchor}",
                    dest.display()
                ));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links in the docs that lead nowhere:\n{}",
        broken.join("\n")
    );
}
