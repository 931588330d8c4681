//! The tests' Python virtualenvs, made ahead of the tests: `target/<name>-venv` holding
//! `tests/peers/<requirements>`, with the stamp the tests check (`tests/common/peers.rs`: a copy
//! of the requirements file it was made from, under that file's name, inside the virtualenv). A
//! virtualenv whose stamp matches is kept; any other is made again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::JoinHandle;

/// `(virtualenv name, requirements file under tests/peers/)`; two MCP SDKs, because both of its
/// major versions import as `mcp`; the x402 SDK apart, because its EVM extras pin web3.py and
/// eth-account, which nothing else needs.
const VENVS: &[(&str, &str)] = &[
    ("peers", "requirements.txt"),
    ("mcp2", "requirements-mcp2.txt"),
    ("mcp1", "requirements-mcp1.txt"),
    ("x402", "requirements-x402.txt"),
];

/// Virtualenvs being made, one thread each.
pub struct Making(Vec<(&'static str, JoinHandle<Result<(), String>>)>);

/// Starts making every virtualenv that is missing or stale, side by side.
pub fn start_all(root: &Path) -> Result<Making, String> {
    let mut making = Vec::new();
    for &(name, requirements) in VENVS {
        let venv = Venv::new(root, name, requirements)?;
        if venv.is_current() {
            continue;
        }
        eprintln!(
            "xtask: making the virtualenv {} (tests/peers/{requirements})",
            venv.dir.display()
        );
        making.push((name, std::thread::spawn(move || venv.make())));
    }
    Ok(Making(making))
}

impl Making {
    /// Waits for every virtualenv; `Err` names each that failed.
    pub fn wait(self) -> Result<(), String> {
        let mut failed = Vec::new();
        for (name, handle) in self.0 {
            match handle.join() {
                Ok(Ok(())) => {}
                Ok(Err(why)) => failed.push(why),
                Err(_) => failed.push(format!("making the {name} virtualenv panicked")),
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(failed.join("\n"))
        }
    }
}

struct Venv {
    dir: PathBuf,
    requirements: PathBuf,
    /// The requirements' text: what the stamp must hold.
    wanted: String,
    stamp: PathBuf,
}

impl Venv {
    fn new(root: &Path, name: &str, requirements: &str) -> Result<Venv, String> {
        let dir = root.join("target").join(format!("{name}-venv"));
        let path = root.join("tests/peers").join(requirements);
        let wanted = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Ok(Venv {
            stamp: dir.join(requirements),
            dir,
            requirements: path,
            wanted,
        })
    }

    fn python(&self) -> PathBuf {
        self.dir.join("bin").join("python")
    }

    fn is_current(&self) -> bool {
        self.python().exists()
            && std::fs::read_to_string(&self.stamp).is_ok_and(|s| s == self.wanted)
    }

    fn make(self) -> Result<(), String> {
        run(Command::new("python3")
            .args(["-m", "venv", "--clear"])
            .arg(&self.dir))?;
        run(Command::new(self.python())
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&self.requirements))?;
        std::fs::write(&self.stamp, &self.wanted)
            .map_err(|e| format!("cannot write {}: {e}", self.stamp.display()))
    }
}

fn run(command: &mut Command) -> Result<(), String> {
    let shown = format!("{command:?}");
    let status = command
        .status()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({status})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_virtualenv_is_current_only_with_its_python_and_a_stamp_of_the_same_requirements() {
        let root = std::env::temp_dir().join(format!("xtask-venvs-{}", std::process::id()));
        let peers = root.join("tests/peers");
        std::fs::create_dir_all(&peers).unwrap();
        std::fs::write(peers.join("requirements.txt"), "six==1.16.0\n").unwrap();
        let venv = Venv::new(&root, "peers", "requirements.txt").unwrap();
        assert!(!venv.is_current(), "nothing made yet");

        std::fs::create_dir_all(venv.dir.join("bin")).unwrap();
        std::fs::write(venv.python(), "").unwrap();
        std::fs::write(&venv.stamp, "six==1.15.0\n").unwrap();
        assert!(!venv.is_current(), "made from other requirements");

        std::fs::write(&venv.stamp, "six==1.16.0\n").unwrap();
        assert!(venv.is_current());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn unreadable_requirements_are_named() {
        let root = Path::new("/nonexistent-xtask-root");
        let Err(e) = Venv::new(root, "peers", "requirements.txt") else {
            panic!("a missing requirements file was read");
        };
        assert!(
            e.starts_with("cannot read /nonexistent-xtask-root/tests/peers/requirements.txt"),
            "{e}"
        );
    }
}
