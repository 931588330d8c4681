//! The x402 tests' chain tools, installed ahead of the tests: the npm project
//! `tests/peers/x402/` (anvil, the local EVM node, and solc-js, pinned by its `package.json` and
//! `package-lock.json`) installed with `npm ci` into `target/x402-node`, with the stamp the tests
//! check (`tests/common/node.rs`: `target/x402-node/installed`, the two files' texts, package.json
//! first). A directory whose stamp matches is kept; any other is installed again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::JoinHandle;

/// The project under the repository, the directory it is installed in under the repository.
const PROJECT: &str = "tests/peers/x402";
const DIR: &str = "target/x402-node";
const STAMP: &str = "installed";

/// Starts installing the chain tools in a thread of their own if they are missing or stale;
/// `None` if they are current.
pub fn start(root: &Path) -> Result<Option<JoinHandle<Result<(), String>>>, String> {
    let tools = Tools::new(root)?;
    if tools.is_current() {
        return Ok(None);
    }
    eprintln!(
        "xtask: installing the x402 tests' chain tools into {} ({PROJECT}/package.json)",
        tools.dir.display()
    );
    Ok(Some(std::thread::spawn(move || tools.install())))
}

/// Waits for an installation [`start`] began; `Err` says why it failed.
pub fn wait(installing: Option<JoinHandle<Result<(), String>>>) -> Result<(), String> {
    match installing.map(JoinHandle::join) {
        None | Some(Ok(Ok(()))) => Ok(()),
        Some(Ok(Err(why))) => Err(why),
        Some(Err(_)) => Err("installing the x402 chain tools panicked".to_string()),
    }
}

struct Tools {
    dir: PathBuf,
    package: String,
    lock: String,
    stamp: PathBuf,
}

impl Tools {
    fn new(root: &Path) -> Result<Tools, String> {
        let read = |name: &str| {
            let path = root.join(PROJECT).join(name);
            std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))
        };
        let dir = root.join(DIR);
        Ok(Tools {
            package: read("package.json")?,
            lock: read("package-lock.json")?,
            stamp: dir.join(STAMP),
            dir,
        })
    }

    /// What the stamp of an installation of these files holds.
    fn wanted(&self) -> String {
        format!("{}{}", self.package, self.lock)
    }

    fn is_current(&self) -> bool {
        self.dir.join("node_modules/.bin/anvil").exists()
            && std::fs::read_to_string(&self.stamp).is_ok_and(|s| s == self.wanted())
    }

    fn install(self) -> Result<(), String> {
        let write = |path: PathBuf, text: &str| {
            std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
        };
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| format!("cannot make {}: {e}", self.dir.display()))?;
        let _ = std::fs::remove_file(&self.stamp);
        write(self.dir.join("package.json"), &self.package)?;
        write(self.dir.join("package-lock.json"), &self.lock)?;
        let shown = format!("npm ci in {}", self.dir.display());
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&self.dir)
            .status()
            .map_err(|e| format!("cannot run {shown}: {e}"))?;
        if !status.success() {
            return Err(format!("{shown} failed ({status})"));
        }
        write(self.stamp.clone(), &self.wanted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_are_current_only_with_anvil_and_a_stamp_of_the_same_package_and_lock() {
        let root = std::env::temp_dir().join(format!("xtask-node-{}", std::process::id()));
        let project = root.join(PROJECT);
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(project.join("package.json"), "{\"a\":1}\n").unwrap();
        std::fs::write(project.join("package-lock.json"), "{\"lock\":1}\n").unwrap();
        let tools = Tools::new(&root).unwrap();
        assert!(!tools.is_current(), "nothing installed yet");

        let bin = tools.dir.join("node_modules/.bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("anvil"), "").unwrap();
        std::fs::write(&tools.stamp, "{\"a\":1}\n{\"lock\":0}\n").unwrap();
        assert!(!tools.is_current(), "installed from another lock");

        std::fs::write(&tools.stamp, "{\"a\":1}\n{\"lock\":1}\n").unwrap();
        assert!(tools.is_current());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn an_unreadable_project_is_named() {
        let Err(e) = Tools::new(Path::new("/nonexistent-xtask-root")) else {
            panic!("a missing package.json was read");
        };
        assert!(
            e.starts_with("cannot read /nonexistent-xtask-root/tests/peers/x402/package.json"),
            "{e}"
        );
    }
}
