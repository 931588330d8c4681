//! `cargo xtask`: the README's two set-up commands, which install what the machine lacks before
//! they build anything (the alias is in `.cargo/config.toml`).
//!
//! | command | installs first | then runs |
//! |---|---|---|
//! | `cargo xtask demo [ARGS…]` | what building needs: a C toolchain, cmake, CA roots | `cargo run --release -- demo ARGS…` |
//! | `cargo xtask test [ARGS…]` | that, and what the tests run: Python with venv, Node.js with npm, PostgreSQL, Redis, Chromium with chromedriver, a font; then the tests' Python virtualenvs and the x402 tests' chain tools | `cargo test --locked ARGS…` |
//! | `cargo xtask install demo\|test` | the same, and stops (CI, or before working offline) | — |
//!
//! System packages come from Debian's (or Ubuntu's) archive through `apt-get`, run as root or
//! through `sudo`; where neither is possible, or the system has no apt, the command stops and
//! names the packages to install ([`packages`]). The virtualenvs and the x402 tests' chain tools
//! (anvil and solc-js, from npm) are the ones the tests would otherwise make on first use, made
//! here side by side while the tests compile ([`venvs`], [`node`]).
//!
//! Why an xtask rather than a shell script: it is Rust like the rest (clippy and the tests see
//! it), it builds with the standard library alone, so it runs before cmake exists, and the same
//! command works wherever cargo does.

mod node;
mod packages;
mod venvs;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use packages::Purpose;

const HELP: &str = "\
cargo xtask: set up this machine, then run interlingua's demo or its tests

Usage:
  cargo xtask demo [ARGS...]       install what building needs, then `cargo run --release -- demo ARGS...`
  cargo xtask test [ARGS...]       install what the tests need (packages, the Python virtualenvs,
                                   the x402 chain tools), then `cargo test --locked ARGS...`
                                   (e.g. `-- --test-threads 1`, or `--test reload`)
  cargo xtask install demo|test    install what `demo` or `test` needs, and stop
  cargo xtask help                 this text

Packages are installed with apt-get (through sudo when not root); where that is not possible, the
command stops and names them. With the packages in place, `cargo run --release -- demo` and
`cargo test` work as well; these commands add only the installation.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, rest) = match args.split_first() {
        Some((c, rest)) => (c.as_str(), rest),
        None => ("help", &[][..]),
    };
    let result = match command {
        "demo" => demo(rest),
        "test" => test(rest),
        "install" => match rest {
            [what] if what == "demo" => packages::ensure(Purpose::Demo),
            [what] if what == "test" => packages::ensure(Purpose::Test).and_then(|()| {
                let root = root();
                let making = start_peers(&root)?;
                making.wait()
            }),
            _ => Err("usage: cargo xtask install demo|test".to_string()),
        },
        "help" | "-h" | "--help" => {
            println!("{HELP}");
            Ok(())
        }
        other => Err(format!("unknown command `{other}`\n\n{HELP}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn demo(args: &[String]) -> Result<(), String> {
    packages::ensure(Purpose::Demo)?;
    cargo(&["run", "--release", "--", "demo"], args)
}

fn test(args: &[String]) -> Result<(), String> {
    packages::ensure(Purpose::Test)?;
    let root = root();
    // pip and npm mostly wait on the network and the disk, the compiler on the cores: side by
    // side, the virtualenvs and the chain tools are ready when the tests are built.
    let making = start_peers(&root)?;
    let built = cargo(&["test", "--locked", "--no-run"], args);
    let made = making.wait();
    built?;
    made?;
    cargo(&["test", "--locked"], args)
}

/// What the tests' peers run in, being made: the virtualenvs and the x402 chain tools.
struct Peers {
    venvs: venvs::Making,
    node: Option<std::thread::JoinHandle<Result<(), String>>>,
}

/// Starts making every virtualenv and the chain tools that are missing or stale, side by side.
fn start_peers(root: &Path) -> Result<Peers, String> {
    Ok(Peers {
        venvs: venvs::start_all(root)?,
        node: node::start(root)?,
    })
}

impl Peers {
    /// Waits for all of them; `Err` names each that failed.
    fn wait(self) -> Result<(), String> {
        match (self.venvs.wait(), node::wait(self.node)) {
            (Ok(()), Ok(())) => Ok(()),
            (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
            (Err(a), Err(b)) => Err(format!("{a}\n{b}")),
        }
    }
}

/// Runs `cargo FIXED… EXTRA…` in the repository; an error names the command and how it ended.
fn cargo(fixed: &[&str], extra: &[String]) -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(fixed)
        .args(extra)
        .current_dir(root())
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "`cargo {}` failed ({status})",
            fixed
                .iter()
                .map(|s| s.to_string())
                .chain(extra.iter().cloned())
                .collect::<Vec<_>>()
                .join(" ")
        ))
    }
}

/// The repository: this crate's parent directory.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}
