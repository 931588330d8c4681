//! Reloading the config while serving. SIGHUP, a change of the config file or of a mapping file
//! ([`watch`]), and `POST /config/reload` on the admin listener all come here: the whole config
//! is read and validated again, exactly as `interlingua check` would, and swapped in at once
//! ([`State::swap`]). New requests see the new routes, upstreams, keys, limits and prices;
//! requests under way finish on the snapshot they started with; tasks keep the price they were
//! created under (it is stored on the task).
//!
//! A file with any problem changes nothing: the old config keeps serving, and each problem is
//! logged with its file:line:col. A file that changes what is bound at start-up (listeners, the
//! store, ...; see [`restart`]) is refused whole. Reloads are serialised; each one's outcome is
//! counted (`interlingua_config_reloads_total{result}`) and kept for `GET /config`.

pub mod restart;
pub mod watch;

use std::sync::Arc;
use std::time::SystemTime;

use prometheus::{IntCounterVec, IntGauge, Opts};
use serde::Serialize;

use crate::config::Config;
use crate::setup::{Setup, Source};
use crate::state::State;

/// What asked for a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    Signal,
    File,
    Admin,
}

/// How a reload ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The new config serves.
    Ok,
    /// The files are as the live config was loaded from: nothing to do.
    Unchanged,
    /// The files have problems; the old config serves on.
    Invalid,
    /// The files change what takes a restart; the old config serves on.
    Refused,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Unchanged => "unchanged",
            Outcome::Invalid => "invalid",
            Outcome::Refused => "refused",
        }
    }
}

/// The routes a reload added, changed and removed, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Changes {
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub removed: Vec<String>,
}

/// One reload, as `GET /config` and the console show it.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub trigger: Trigger,
    pub result: Outcome,
    /// When it ended (RFC 3339, UTC).
    pub at: String,
    /// The live generation once it ended.
    pub generation: u64,
    /// Each problem as `interlingua check` prints it (invalid and refused).
    pub problems: Vec<String>,
    /// What changed (ok).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<Changes>,
}

/// Reloads the config of one server.
pub struct Reloader {
    state: Arc<State>,
    source: Source,
    /// Held for the whole of a reload (they are serialised); holds the digest of the files the
    /// live config was loaded from.
    running: tokio::sync::Mutex<u64>,
    last: parking_lot::Mutex<Option<Report>>,
    loaded_at: parking_lot::Mutex<String>,
    reloads: IntCounterVec,
    generation: IntGauge,
    last_success: IntGauge,
}

impl Reloader {
    /// The reloader of a server started from `source`, whose files had `digest`.
    pub fn new(state: Arc<State>, source: Source, digest: u64) -> Arc<Reloader> {
        let reloads = IntCounterVec::new(
            Opts::new(
                "interlingua_config_reloads_total",
                "Config reloads, by result (ok, unchanged, invalid: the files have problems, \
                 refused: they change what takes a restart).",
            ),
            &["result"],
        )
        .expect("static metric definition");
        for o in [
            Outcome::Ok,
            Outcome::Unchanged,
            Outcome::Invalid,
            Outcome::Refused,
        ] {
            reloads.with_label_values(&[o.as_str()]);
        }
        let generation = IntGauge::new(
            "interlingua_config_generation",
            "The live config's generation: 1 at start, one more per reload applied.",
        )
        .expect("static metric definition");
        generation.set(1);
        let last_success = IntGauge::new(
            "interlingua_config_last_reload_success_timestamp_seconds",
            "When the live config was loaded (start-up or the last reload applied), in seconds \
             since the epoch.",
        )
        .expect("static metric definition");
        last_success.set(unix_now());
        for c in [
            Box::new(reloads.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(generation.clone()),
            Box::new(last_success.clone()),
        ] {
            state.metrics.register(c);
        }
        Arc::new(Reloader {
            state,
            source,
            running: tokio::sync::Mutex::new(digest),
            last: parking_lot::Mutex::new(None),
            loaded_at: parking_lot::Mutex::new(now_rfc3339()),
            reloads,
            generation,
            last_success,
        })
    }

    /// Where the config is read from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The last reload, if any was tried.
    pub fn last(&self) -> Option<Report> {
        self.last.lock().clone()
    }

    /// When the live config was loaded (RFC 3339).
    pub fn loaded_at(&self) -> String {
        self.loaded_at.lock().clone()
    }

    /// Reads, validates and applies the config again. Never fails: the outcome says what
    /// happened, and is logged, counted and kept.
    pub async fn reload(&self, trigger: Trigger) -> Report {
        let mut digest = self.running.lock().await;
        let source = self.source.clone();
        // Reading files and compiling mappings blocks: off the runtime's workers.
        let loaded = tokio::task::spawn_blocking(move || {
            source
                .load()
                .map_err(|problems| problems.iter().map(ToString::to_string).collect())
        })
        .await
        .unwrap_or_else(|e| Err(vec![format!("the reload stopped: {e}")]));
        let live = self.state.live();
        let (result, problems, changes) = match loaded {
            Err(problems) => (Outcome::Invalid, problems, None),
            Ok(setup) if setup.digest == *digest => (Outcome::Unchanged, Vec::new(), None),
            Ok(setup) => {
                let refused = restart::restart_only(&live.config, &setup.config);
                if refused.is_empty() {
                    let new_digest = setup.digest;
                    match self.apply(setup, &live.config) {
                        Ok(changes) => {
                            *digest = new_digest;
                            (Outcome::Ok, Vec::new(), Some(changes))
                        }
                        Err(problem) => (Outcome::Invalid, vec![problem], None),
                    }
                } else {
                    (
                        Outcome::Refused,
                        refused.iter().map(ToString::to_string).collect(),
                        None,
                    )
                }
            }
        };
        let report = Report {
            trigger,
            result,
            at: now_rfc3339(),
            generation: self.state.live().generation,
            problems,
            changes,
        };
        self.reloads.with_label_values(&[result.as_str()]).inc();
        log(&report);
        *self.last.lock() = Some(report.clone());
        report
    }

    /// Swaps in a validated setup; the changes it made, or why it could not be built.
    fn apply(&self, setup: Setup, old: &Config) -> Result<Changes, String> {
        let changes = changes(old, &setup.config);
        let live = self
            .state
            .swap(setup.config, setup.dialects)
            .map_err(|e| format!("{}: {e}", old.origin))?;
        self.generation.set(live.generation as i64);
        self.last_success.set(unix_now());
        *self.loaded_at.lock() = now_rfc3339();
        warn_on_moved_agents(old, &live.config);
        Ok(changes)
    }
}

/// The routes `new` adds, changes and removes from `old`, by name.
fn changes(old: &Config, new: &Config) -> Changes {
    let mut c = Changes::default();
    for r in &new.routes {
        match old.routes.iter().find(|o| o.name == r.name) {
            None => c.added.push(r.name.clone()),
            Some(o) => {
                let agent =
                    |cfg: &Config, r: &crate::config::Route| cfg.upstreams.get(r.upstream).cloned();
                if o != r || agent(old, o) != agent(new, r) {
                    c.changed.push(r.name.clone());
                }
            }
        }
    }
    for o in &old.routes {
        if !new.routes.iter().any(|r| r.name == o.name) {
            c.removed.push(o.name.clone());
        }
    }
    c
}

/// A route whose agent (its upstream's address) changed sends the polls of its running tasks to
/// the new agent, which does not know them: say so, so that the operator can give a new agent a
/// new route instead.
fn warn_on_moved_agents(old: &Config, new: &Config) {
    for r in &new.routes {
        let Some(o) = old.routes.iter().find(|o| o.name == r.name) else {
            continue;
        };
        let (Some(a), Some(b)) = (old.upstreams.get(o.upstream), new.upstreams.get(r.upstream))
        else {
            continue;
        };
        if r.is_translated() && a.authority() != b.authority() {
            tracing::warn!(
                route = %r.name,
                from = %a.authority(),
                to = %b.authority(),
                "the route now reaches another agent: its unfinished tasks are polled there"
            );
        }
    }
}

fn log(report: &Report) {
    match report.result {
        Outcome::Ok => {
            let c = report.changes.clone().unwrap_or_default();
            tracing::info!(
                trigger = ?report.trigger,
                generation = report.generation,
                added = ?c.added,
                changed = ?c.changed,
                removed = ?c.removed,
                "config reloaded"
            );
        }
        // A file saved as it was is no news; a reload someone asked for is answered.
        Outcome::Unchanged if report.trigger == Trigger::File => {
            tracing::debug!(trigger = ?report.trigger, "config reload: the files are unchanged")
        }
        Outcome::Unchanged => {
            tracing::info!(trigger = ?report.trigger, "config reload: the files are unchanged")
        }
        Outcome::Invalid | Outcome::Refused => {
            for p in &report.problems {
                tracing::error!("{p}");
            }
            tracing::error!(
                trigger = ?report.trigger,
                result = report.result.as_str(),
                problems = report.problems.len(),
                generation = report.generation,
                "config reload not applied: the running config is unchanged"
            );
        }
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
