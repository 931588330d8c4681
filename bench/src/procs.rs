//! The processes a run starts: spawned pinned to CPUs, written to a pid file as they start (so
//! `bench/run`'s exit trap can stop exactly these, even if this process dies), each bounded in
//! time, and stopped by pid — never by name. Also what `/proc` says about them: CPU time and
//! peak resident memory.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Every process this run started and has not yet stopped.
pub struct Procs {
    pidfile: PathBuf,
    live: Mutex<Vec<(u32, String)>>,
    /// Where processes are pinned: `None` runs them unpinned.
    pin: bool,
    clk_tck: f64,
}

/// A long-running process (a contender, the upstream), stopped when dropped.
pub struct Service {
    pub name: String,
    pub pid: u32,
    child: Child,
    procs: Arc<Procs>,
    /// Where its stderr goes.
    pub log: PathBuf,
}

impl Procs {
    /// A registry writing started pids to `pidfile`.
    pub fn new(pidfile: &Path, pin: bool) -> std::io::Result<Arc<Procs>> {
        File::create(pidfile)?;
        let clk_tck = Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse::<f64>().ok())
            .unwrap_or(100.0);
        Ok(Arc::new(Procs {
            pidfile: pidfile.to_path_buf(),
            live: Mutex::new(Vec::new()),
            pin,
            clk_tck,
        }))
    }

    /// Whether processes are pinned to CPUs.
    pub fn pins(&self) -> bool {
        self.pin
    }

    /// A command running `program` on `cpus` (a `taskset` CPU list). `taskset` execs the
    /// program, so the pid spawned is the program's own.
    pub fn command(&self, cpus: &str, program: &Path, args: &[String]) -> Command {
        let mut c = if self.pin {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(cpus).arg(program);
            c
        } else {
            Command::new(program)
        };
        c.args(args).stdin(Stdio::null());
        c
    }

    fn register(&self, pid: u32, name: &str) {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.push((pid, name.to_string()));
        // The start time tells this process from a later one that reuses its pid.
        let start = start_time(pid).unwrap_or(0);
        if let Ok(mut f) = OpenOptions::new().append(true).open(&self.pidfile) {
            let _ = writeln!(f, "{pid} {start} {name}");
        }
    }

    fn forget(&self, pid: u32) {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|(p, _)| *p != pid);
    }

    /// Starts a long-running process whose stdout announces readiness with a line starting with
    /// `ready_prefix`; returns it and that line. Its stderr goes to `log`. Fails (and stops the
    /// process) when it exits or stays silent for `within`.
    pub fn start(
        self: &Arc<Self>,
        name: &str,
        mut cmd: Command,
        log: &Path,
        ready_prefix: &str,
        within: Duration,
    ) -> Result<(Service, String), String> {
        let stderr = File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        cmd.stdout(Stdio::piped()).stderr(stderr);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        let pid = child.id();
        self.register(pid, name);
        let stdout = child.stdout.take();
        let service = Service {
            name: name.to_string(),
            pid,
            child,
            procs: self.clone(),
            log: log.to_path_buf(),
        };
        let (tx, rx) = mpsc::channel();
        let prefix = ready_prefix.to_string();
        std::thread::spawn(move || {
            let Some(out) = stdout else { return };
            let mut sent = false;
            // Keep reading after the ready line: a full pipe would stall the process.
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if !sent && line.starts_with(&prefix) {
                    let _ = tx.send(line);
                    sent = true;
                }
            }
        });
        match rx.recv_timeout(within) {
            Ok(line) => Ok((service, line)),
            Err(_) => {
                let tail = tail_of(log, 20);
                drop(service);
                Err(format!(
                    "{name} did not become ready within {}s; its log ({}) ends:\n{tail}",
                    within.as_secs(),
                    log.display()
                ))
            }
        }
    }

    /// Starts a long-running process that announces nothing (nginx); the caller checks it.
    pub fn start_quiet(
        self: &Arc<Self>,
        name: &str,
        mut cmd: Command,
        log: &Path,
    ) -> Result<Service, String> {
        let stderr = File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        cmd.stdout(Stdio::null()).stderr(stderr);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        let pid = child.id();
        self.register(pid, name);
        Ok(Service {
            name: name.to_string(),
            pid,
            child,
            procs: self.clone(),
            log: log.to_path_buf(),
        })
    }

    /// Runs a command to completion within `limit`, returning its stdout; stops it (by pid) when
    /// it overruns. A non-zero exit is an error carrying its stderr.
    pub fn run(&self, name: &str, mut cmd: Command, limit: Duration) -> Result<String, String> {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        let pid = child.id();
        self.register(pid, name);
        let read = |r: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut s = String::new();
                if let Some(mut r) = r {
                    let _ = r.read_to_string(&mut s);
                }
                s
            })
        };
        let out = read(
            child
                .stdout
                .take()
                .map(|r| Box::new(r) as Box<dyn Read + Send>),
        );
        let err = read(
            child
                .stderr
                .take()
                .map(|r| Box::new(r) as Box<dyn Read + Send>),
        );
        let deadline = Instant::now() + limit;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() >= deadline => {
                    stop(&mut child, Duration::from_secs(2));
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => break None,
            }
        };
        self.forget(pid);
        let out = out.join().unwrap_or_default();
        let err = err.join().unwrap_or_default();
        match status {
            Some(s) if s.success() => Ok(out),
            Some(s) => Err(format!("{name} failed ({s}): {}", err.trim())),
            None => Err(format!(
                "{name} overran its {}s limit and was stopped",
                limit.as_secs()
            )),
        }
    }

    /// Stops every process still running (on the way out, or on a signal).
    pub fn stop_all(&self) {
        let live: Vec<(u32, String)> = self.live.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (pid, _) in &live {
            let _ = kill(Pid::from_raw(*pid as i32), Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        for (pid, _) in live {
            while alive(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if alive(pid) {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
        }
    }

    /// CPU seconds (user + system, all threads) used so far by `pid` and, with `children`, by
    /// its direct children (nginx's workers).
    pub fn cpu_seconds(&self, pid: u32, children: bool) -> f64 {
        self.cpu(pid, children).total()
    }

    /// CPU seconds used so far by `pid` (and, with `children`, its direct children), split into
    /// user and kernel time.
    pub fn cpu(&self, pid: u32, children: bool) -> Cpu {
        let (user, kernel) = tree(pid, children)
            .iter()
            .filter_map(|p| stat_ticks(*p))
            .fold((0, 0), |(u, k), (pu, pk)| (u + pu, k + pk));
        Cpu {
            user: user as f64 / self.clk_tck,
            kernel: kernel as f64 / self.clk_tck,
        }
    }
}

/// CPU seconds in user space and in the kernel (system calls, and the network stack's work done
/// on the process's behalf).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cpu {
    pub user: f64,
    pub kernel: f64,
}

impl Cpu {
    pub fn total(self) -> f64 {
        self.user + self.kernel
    }
}

impl std::ops::Sub for Cpu {
    type Output = Cpu;
    fn sub(self, earlier: Cpu) -> Cpu {
        Cpu {
            user: self.user - earlier.user,
            kernel: self.kernel - earlier.kernel,
        }
    }
}

/// Resident memory (VmRSS) of `pid` now, in MiB.
pub fn rss_mib(pid: u32) -> Option<f64> {
    status_kb(pid, "VmRSS:").map(|kb| kb as f64 / 1024.0)
}

/// Peak resident memory (VmHWM) of `pid` and, with `children`, its direct children, in MiB.
pub fn peak_rss_mib(pid: u32, children: bool) -> Option<f64> {
    let kb: u64 = tree(pid, children)
        .iter()
        .filter_map(|p| status_kb(*p, "VmHWM:"))
        .sum();
    (kb > 0).then(|| kb as f64 / 1024.0)
}

fn tree(pid: u32, children: bool) -> Vec<u32> {
    let mut pids = vec![pid];
    if children {
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
            pids.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    pids
}

/// utime + stime from `/proc/PID/stat` (fields 14 and 15, counted after the command name, which
/// may itself hold spaces and parentheses).
/// (user, kernel) clock ticks of `pid`.
fn stat_ticks(pid: u32) -> Option<(u64, u64)> {
    parse_stat_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// utime and stime (fields 14 and 15) of a `/proc/PID/stat` line. The command name (field 2)
/// may hold spaces and parentheses, so fields are counted from its closing parenthesis.
fn parse_stat_ticks(s: &str) -> Option<(u64, u64)> {
    let rest = s.get(s.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state).
    Some((f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?))
}

/// The process's start time in clock ticks since boot (`/proc/PID/stat` field 22).
fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 2..]
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

fn status_kb(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn alive(pid: u32) -> bool {
    // A zombie has exited; only its parent's wait is missing.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s.rfind(')').and_then(|i| s.get(i + 2..i + 3)) != Some("Z"),
        Err(_) => false,
    }
}

/// SIGTERM, then SIGKILL after `grace`; reaps the child.
fn stop(child: &mut Child, grace: Duration) {
    let pid = Pid::from_raw(child.id() as i32);
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The last `n` lines of a log file, for error messages.
pub fn tail_of(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Service {
    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        stop(&mut self.child, Duration::from_secs(5));
        self.procs.forget(self.pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_user_and_kernel_ticks() {
        // A command name with a space and a parenthesis, as thread names can have.
        let line =
            "4242 (Timer (x) 1) S 1 4242 4242 0 -1 4194560 120 0 0 0 731 269 0 0 20 0 5 0 1000 0 0";
        assert_eq!(parse_stat_ticks(line), Some((731, 269)));
        assert_eq!(parse_stat_ticks("4242 (short) S 1 2"), None);
        assert_eq!(parse_stat_ticks("no parenthesis"), None);
    }

    #[test]
    fn cpu_times_subtract_field_by_field() {
        let later = Cpu {
            user: 3.0,
            kernel: 5.0,
        };
        let earlier = Cpu {
            user: 1.0,
            kernel: 1.5,
        };
        assert_eq!(
            later - earlier,
            Cpu {
                user: 2.0,
                kernel: 3.5
            }
        );
        assert_eq!((later - earlier).total(), 5.5);
    }
}
