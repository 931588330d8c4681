//! The Debian packages each command needs, which of them this machine lacks, and installing those.
//!
//! A package counts as present when what the build or the tests use of it works here (a command
//! on `PATH`, a file, a Python module), not when `dpkg` lists it: a Python with `venv` built in,
//! or a PostgreSQL from elsewhere, needs nothing installed. What is missing is installed with
//! `apt-get`, as root or through `sudo`, then looked for again.

use std::path::Path;
use std::process::{Command, Stdio};

/// What the packages are for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Purpose {
    /// Building interlingua and running its demo.
    Demo,
    /// Running the whole test suite (which also builds).
    Test,
}

/// How to tell that a package's part is present.
#[derive(Debug)]
enum Probe {
    /// A program on `PATH`.
    Program(&'static str),
    /// One of these files exists.
    AnyFile(&'static [&'static str]),
    /// `python3 -c "import MODULE"` succeeds.
    PythonModule(&'static str),
    /// A program in `/usr/lib/postgresql/<version>/bin` (Debian's place) or on `PATH`.
    PostgresProgram(&'static str),
}

/// One Debian package, and why interlingua needs it.
#[derive(Debug)]
pub struct Package {
    pub name: &'static str,
    pub why: &'static str,
    probe: Probe,
    purpose: Purpose,
}

/// Every package, in the order apt is asked for them.
const PACKAGES: &[Package] = &[
    Package {
        name: "build-essential",
        why: "a C and C++ toolchain: ring, SQLite and libFuzzer are built from C",
        probe: Probe::Program("c++"),
        purpose: Purpose::Demo,
    },
    Package {
        name: "cmake",
        why: "pingora's compression library, zlib-ng, builds with cmake",
        probe: Probe::Program("cmake"),
        purpose: Purpose::Demo,
    },
    Package {
        name: "ca-certificates",
        why: "the CA roots that upstream TLS connections are verified against",
        probe: Probe::AnyFile(&["/etc/ssl/certs/ca-certificates.crt"]),
        purpose: Purpose::Demo,
    },
    Package {
        name: "python3",
        why:
            "the tests run the real SDKs (masumi, a2a-sdk, payments-py, the MCP SDK, x402) as peers",
        probe: Probe::Program("python3"),
        purpose: Purpose::Test,
    },
    Package {
        name: "python3-venv",
        why: "the peers' virtualenvs (Debian's Python has no ensurepip without it)",
        probe: Probe::PythonModule("ensurepip"),
        purpose: Purpose::Test,
    },
    Package {
        name: "nodejs",
        why: "the x402 tests compile their token with solc-js, which runs on Node.js",
        probe: Probe::Program("node"),
        purpose: Purpose::Test,
    },
    Package {
        name: "npm",
        why: "installs the x402 tests' pinned chain tools (anvil, solc-js) into target/x402-node",
        probe: Probe::Program("npm"),
        purpose: Purpose::Test,
    },
    Package {
        name: "postgresql",
        why: "the PostgreSQL store's and the fleet's tests start their own server (initdb)",
        probe: Probe::PostgresProgram("initdb"),
        purpose: Purpose::Test,
    },
    Package {
        name: "redis-server",
        why: "the shared rate limits' tests start their own Redis",
        probe: Probe::Program("redis-server"),
        purpose: Purpose::Test,
    },
    Package {
        name: "chromium",
        why: "the console's test runs in a real headless browser",
        probe: Probe::AnyFile(&["/usr/bin/chromium"]),
        purpose: Purpose::Test,
    },
    Package {
        name: "chromium-driver",
        why: "the console's test drives the browser through chromedriver (WebDriver)",
        probe: Probe::AnyFile(&["/usr/bin/chromedriver"]),
        purpose: Purpose::Test,
    },
    Package {
        name: "fonts-dejavu-core",
        why: "a font for the console's pictures and the benchmark's plots",
        probe: Probe::AnyFile(&["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"]),
        purpose: Purpose::Test,
    },
];

/// The packages `purpose` needs: the demo's for both, the tests' for `Test` only.
pub fn needed(purpose: Purpose) -> impl Iterator<Item = &'static Package> {
    PACKAGES
        .iter()
        .filter(move |p| p.purpose == Purpose::Demo || purpose == Purpose::Test)
}

/// Installs what `purpose` needs and this machine lacks; `Err` says what is still missing and how
/// to install it.
pub fn ensure(purpose: Purpose) -> Result<(), String> {
    let missing: Vec<&Package> = needed(purpose).filter(|p| !p.present()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = missing.iter().map(|p| p.name).collect();
    eprintln!("xtask: installing {}:", names.join(" "));
    for p in &missing {
        eprintln!("  {:<18} {}", p.name, p.why);
    }
    install(&names).map_err(|why| explain(&missing, &why))?;
    let still: Vec<&Package> = missing.into_iter().filter(|p| !p.present()).collect();
    if still.is_empty() {
        Ok(())
    } else {
        Err(explain(
            &still,
            "apt-get installed them, but they are still not found (see `cargo xtask help`)",
        ))
    }
}

/// The error for packages that could not be installed: which, why each, and the command to run.
fn explain(missing: &[&Package], why: &str) -> String {
    let mut text = format!("{why}.\nThese packages are needed:\n");
    for p in missing {
        text.push_str(&format!("  {:<18} {}\n", p.name, p.why));
    }
    let names: Vec<&str> = missing.iter().map(|p| p.name).collect();
    text.push_str(&format!(
        "On Debian or Ubuntu, as root: apt-get install --no-install-recommends {}\n\
         Elsewhere, install their equivalents, then run the command again.",
        names.join(" ")
    ));
    text
}

/// `apt-get update` and `apt-get install` of `names`, as root or through `sudo`.
fn install(names: &[&str]) -> Result<(), String> {
    if !on_path("apt-get") {
        return Err("this system has no apt-get".to_string());
    }
    let sudo = if is_root() {
        None
    } else if on_path("sudo") {
        Some("sudo")
    } else {
        return Err("installing needs root, and sudo is not installed".to_string());
    };
    let run = |args: &[&str]| -> Result<(), String> {
        let mut command = match sudo {
            Some(sudo) => {
                let mut c = Command::new(sudo);
                c.arg("env")
                    .arg("DEBIAN_FRONTEND=noninteractive")
                    .arg("apt-get");
                c
            }
            None => {
                let mut c = Command::new("apt-get");
                c.env("DEBIAN_FRONTEND", "noninteractive");
                c
            }
        };
        let status = command
            .args(args)
            .status()
            .map_err(|e| format!("cannot run apt-get: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("`apt-get {}` failed ({status})", args.join(" ")))
        }
    };
    run(&["update", "-qq"])?;
    let mut args = vec!["install", "-y", "-qq", "--no-install-recommends"];
    args.extend_from_slice(names);
    run(&args)
}

impl Package {
    /// Whether what interlingua uses of this package works here.
    fn present(&self) -> bool {
        match &self.probe {
            Probe::Program(name) => on_path(name),
            Probe::AnyFile(paths) => paths.iter().any(|p| Path::new(p).exists()),
            Probe::PythonModule(module) => Command::new("python3")
                .args(["-c", &format!("import {module}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
            Probe::PostgresProgram(name) => {
                on_path(name)
                    || std::fs::read_dir("/usr/lib/postgresql").is_ok_and(|versions| {
                        versions
                            .flatten()
                            .any(|v| v.path().join("bin").join(name).is_file())
                    })
            }
        }
    }
}

/// Whether `name` is an executable file in one of `PATH`'s directories.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(name)).is_ok_and(|m| {
                m.is_file()
                    && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            })
        })
    })
}

/// Whether this process runs as root (`id -u` prints 0).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tests_need_everything_the_demo_needs_and_more() {
        let demo: Vec<&str> = needed(Purpose::Demo).map(|p| p.name).collect();
        let test: Vec<&str> = needed(Purpose::Test).map(|p| p.name).collect();
        assert_eq!(demo, ["build-essential", "cmake", "ca-certificates"]);
        assert!(demo.iter().all(|d| test.contains(d)));
        assert!(test.contains(&"postgresql") && test.contains(&"chromium-driver"));
        assert!(test.contains(&"nodejs") && test.contains(&"npm"));
        assert!(!demo.contains(&"nodejs") && !demo.contains(&"npm"));
    }

    #[test]
    fn node_and_npm_count_as_present_by_their_programs_on_path() {
        let probe = |name: &str| PACKAGES.iter().find(|p| p.name == name).map(|p| &p.probe);
        // Debian's package is `nodejs`, its program `node`: the probe looks for the program.
        assert!(matches!(probe("nodejs"), Some(Probe::Program("node"))));
        assert!(matches!(probe("npm"), Some(Probe::Program("npm"))));
    }

    #[test]
    fn a_missing_package_is_named_with_its_reason_and_the_command_that_installs_it() {
        let cmake = PACKAGES.iter().find(|p| p.name == "cmake").map(|p| vec![p]);
        let text = explain(&cmake.unwrap_or_default(), "this system has no apt-get");
        assert!(text.starts_with("this system has no apt-get.\n"), "{text}");
        assert!(
            text.contains("cmake              pingora's compression library"),
            "{text}"
        );
        assert!(
            text.contains("apt-get install --no-install-recommends cmake\n"),
            "{text}"
        );
    }

    #[test]
    fn a_program_is_found_on_path_only_when_it_is_there() {
        assert!(on_path("sh"));
        assert!(!on_path("no-such-program-interlingua-xtask"));
    }
}
