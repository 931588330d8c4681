//! The x402 tests' chain tools, from npm, and the token they build.
//!
//! `tests/peers/x402/package.json` pins anvil (a local EVM node, shipped as a binary in the npm
//! package `@foundry-rs/anvil-linux-amd64`) and solc-js (the Solidity compiler, npm `solc`); its
//! `package-lock.json` pins the rest. [`x402_node`] installs them with `npm ci` into
//! `target/x402-node` on first use (needs `node` and `npm`: Debian's `nodejs` and `npm`), and
//! again whenever either file changes: the stamp `target/x402-node/installed` holds the two files'
//! texts, package.json first, as `xtask/src/node.rs` writes it when it installs them ahead of the
//! tests. `$INTERLINGUA_X402_NODE`, if set, names such a directory, installed already, to use as
//! it is.
//!
//! [`token_build`] compiles the tests' contracts with that solc-js, once: `Token.sol` (the EIP-3009
//! stablecoin) and `Permit2.sol` (Permit2's signature transfer and x402's `upto` proxy, for
//! `upto` payments). The output is kept under `target/x402-token/<digest>/` (`Token`, `Permit2`
//! and `UptoProxy`, each `.bin` and `.abi`), keyed by the digest of the sources and of the lock
//! that pins the compiler.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use super::peers::root;

/// The stamp's name inside the installed directory.
const STAMP: &str = "installed";

/// The directory holding the installed chain tools (`node_modules/.bin/anvil`, `…/solcjs`),
/// installed on first use. Tests of one binary run in parallel: the first caller installs while
/// the others wait. Panics, saying what to install, if `npm` is missing or `npm ci` fails.
pub fn x402_node() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(install)
}

/// anvil, the local EVM node.
pub fn anvil() -> PathBuf {
    x402_node().join("node_modules/.bin/anvil")
}

/// solc-js's command-line compiler (a node script).
pub fn solcjs() -> PathBuf {
    x402_node().join("node_modules/.bin/solcjs")
}

fn install() -> PathBuf {
    if let Some(dir) = std::env::var_os("INTERLINGUA_X402_NODE") {
        return PathBuf::from(dir);
    }
    let project = root().join("tests/peers/x402");
    let dir = root().join("target/x402-node");
    let read = |name: &str| {
        let path = project.join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
    };
    let (package, lock) = (read("package.json"), read("package-lock.json"));
    let wanted = format!("{package}{lock}");
    let stamp = dir.join(STAMP);
    let installed = dir.join("node_modules/.bin/anvil").exists()
        && std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str());
    if installed {
        return dir;
    }
    std::fs::create_dir_all(&dir).expect("target/x402-node");
    let _ = std::fs::remove_file(&stamp);
    std::fs::write(dir.join("package.json"), &package).expect("package.json");
    std::fs::write(dir.join("package-lock.json"), &lock).expect("package-lock.json");
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir)
        .status()
        .expect("npm is needed for the x402 tests' chain tools (Debian: nodejs npm)");
    assert!(status.success(), "npm ci in {} failed", dir.display());
    std::fs::write(&stamp, wanted).expect("the stamp");
    dir
}

/// The directory holding `Token.bin` (hex) and `Token.abi` (JSON) of `tests/peers/x402/Token.sol`,
/// compiled on first use (`solcjs --bin --abi --optimize`), or found under `target/x402-token/`
/// from an earlier run of the same source and compiler. Panics with solc's messages if it does
/// not compile.
pub fn token_build() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(compile)
}

/// The tests' Solidity sources, and the contracts each holds.
const SOURCES: [(&str, &[&str]); 2] = [
    ("Token.sol", &["Token"]),
    ("Permit2.sol", &["Permit2", "UptoProxy"]),
];

fn compile() -> PathBuf {
    let project = root().join("tests/peers/x402");
    let lock = std::fs::read(project.join("package-lock.json")).expect("package-lock.json");
    let sources: Vec<(&str, Vec<u8>)> = SOURCES
        .iter()
        .map(|(file, _)| {
            let text = std::fs::read(project.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            (*file, text)
        })
        .collect();
    let mut hasher = Sha256::new();
    for (_, text) in &sources {
        hasher.update(text);
    }
    let digest = hex::encode(&hasher.chain_update(&lock).finalize()[..8]);
    let builds = root().join("target/x402-token");
    let dir = builds.join(&digest);
    let built = |dir: &Path| {
        SOURCES
            .iter()
            .flat_map(|(_, cs)| cs.iter())
            .all(|c| dir.join(format!("{c}.bin")).exists() && dir.join(format!("{c}.abi")).exists())
    };
    if built(&dir) {
        return dir;
    }
    // Built beside and renamed into place, so that a build cut short is never taken for one.
    std::fs::create_dir_all(&builds).expect("target/x402-token");
    let work = tempfile::tempdir_in(&builds).expect("a build directory");
    for (file, text) in &sources {
        std::fs::write(work.path().join(file), text).expect("copy a source");
    }
    for (file, contracts) in SOURCES {
        let out = Command::new(solcjs())
            .args(["--bin", "--abi", "--optimize", "-o", ".", file])
            .current_dir(work.path())
            .output()
            .expect("solcjs runs (it needs node on PATH)");
        assert!(
            out.status.success(),
            "solcjs failed on {file}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // solcjs names its output after the file and the contract.
        let stem = file.trim_end_matches(".sol");
        for contract in contracts {
            for ext in ["bin", "abi"] {
                std::fs::rename(
                    work.path().join(format!("{stem}_sol_{contract}.{ext}")),
                    work.path().join(format!("{contract}.{ext}")),
                )
                .unwrap_or_else(|e| panic!("solcjs wrote no {stem}_sol_{contract}.{ext}: {e}"));
            }
        }
    }
    let work = work.keep();
    if std::fs::rename(&work, &dir).is_err() {
        // Another process put the same build there first.
        let _ = std::fs::remove_dir_all(&work);
    }
    dir
}
